from django.urls import path

from apps.members import exports, signup_views, views

app_name = "members"
urlpatterns = [
    path("me/", views.DashboardView.as_view(), name="dashboard"),
    path("me/data.json", views.MemberDataView.as_view(), name="member_data"),
    path("signup/", signup_views.SignUpView.as_view(), name="signup"),
    path("office-hours/", views.OfficeHoursView.as_view(), name="office_hours"),
    path("office-hours/members.csv", exports.MemberExportView.as_view(), name="member_export"),
    path("office-hours/members/new/", views.MemberRegisterView.as_view(), name="member_register"),
    path("office-hours/members/<int:pk>/", views.MemberDetailView.as_view(), name="member_detail"),
    path(
        "office-hours/members/<int:pk>/check-in/",
        views.MemberCheckInView.as_view(),
        name="member_check_in",
    ),
    path(
        "office-hours/members/<int:pk>/suspend/",
        views.MemberSuspendView.as_view(),
        name="member_suspend",
    ),
    path("office-hours/members/<int:pk>/move/", views.MemberMoveView.as_view(), name="member_move"),
    path("office-hours/members/<int:pk>/end/", views.MemberEndView.as_view(), name="member_end"),
    path(
        "office-hours/members/<int:pk>/contact/",
        views.MemberContactView.as_view(),
        name="member_contact",
    ),
]
