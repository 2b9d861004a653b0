from django.urls import path

from apps.notifications import views

app_name = "notifications"
urlpatterns = [
    path("me/notices/", views.NoticeListView.as_view(), name="notice_list"),
    path("me/notices/<int:pk>/", views.NoticeDetailView.as_view(), name="notice_detail"),
    path("me/notices/preferences/", views.PreferenceView.as_view(), name="preferences"),
]
