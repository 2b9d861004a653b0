from django.urls import path

from apps.traffic import views

app_name = "traffic"
urlpatterns = [
    path("traffic/top/", views.TopTalkersView.as_view(), name="top"),
    path("members/<int:pk>/traffic/", views.MemberTrafficView.as_view(), name="member"),
]
