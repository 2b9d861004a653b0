"""The API routes of traffic (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.traffic.api import MemberTrafficAPI, TopTalkersAPI

urlpatterns = [
    path("members/<int:pk>/traffic/", MemberTrafficAPI.as_view(), name="api-member-traffic"),
    path("traffic/top/", TopTalkersAPI.as_view(), name="api-traffic-top"),
]
