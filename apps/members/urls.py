from django.urls import path

from apps.members import signup_views, views

app_name = "members"
urlpatterns = [
    path("me/", views.DashboardView.as_view(), name="dashboard"),
    path("me/data.json", views.MemberDataView.as_view(), name="member_data"),
    path("signup/", signup_views.SignUpView.as_view(), name="signup"),
    path("office-hours/", views.OfficeHoursView.as_view(), name="office_hours"),
    path("office-hours/members/new/", views.MemberRegisterView.as_view(), name="member_register"),
    path("office-hours/members/<int:pk>/", views.MemberDetailView.as_view(), name="member_detail"),
]
