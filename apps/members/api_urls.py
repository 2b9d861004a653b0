"""The API routes of members (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.members.api import (
    MemberCheckInAPI,
    MemberDataAPI,
    MemberDetailAPI,
    MemberEndAPI,
    MemberListAPI,
    MemberMoveAPI,
    MemberSuspendAPI,
    MemberUnsuspendAPI,
    RoomDetailAPI,
    RoomListAPI,
)

urlpatterns = [
    path("members/", MemberListAPI.as_view(), name="api-members"),
    path("members/<int:pk>/", MemberDetailAPI.as_view(), name="api-member"),
    path("members/<int:pk>/data/", MemberDataAPI.as_view(), name="api-member-data"),
    path("me/data/", MemberDataAPI.as_view(), name="api-me-data"),
    path("members/<int:pk>/check-in/", MemberCheckInAPI.as_view(), name="api-member-check-in"),
    path("members/<int:pk>/suspend/", MemberSuspendAPI.as_view(), name="api-member-suspend"),
    path("members/<int:pk>/unsuspend/", MemberUnsuspendAPI.as_view(), name="api-member-unsuspend"),
    path("members/<int:pk>/move/", MemberMoveAPI.as_view(), name="api-member-move"),
    path("members/<int:pk>/end/", MemberEndAPI.as_view(), name="api-member-end"),
    path("rooms/", RoomListAPI.as_view(), name="api-rooms"),
    path("rooms/<int:pk>/", RoomDetailAPI.as_view(), name="api-room"),
]
