"""All API routes under /api/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.abuse.api import AbuseLookupAPI
from apps.accounts.api import MeAPI
from apps.health.api import SystemStatusAPI
from apps.members.api import (
    MemberDataAPI,
    MemberDetailAPI,
    MemberListAPI,
    RoomDetailAPI,
    RoomListAPI,
)
from apps.network.api import (
    DeviceDetailAPI,
    DeviceListAPI,
    Ipv6OpeningDetailAPI,
    Ipv6OpeningListAPI,
    PortForwardDetailAPI,
    PortForwardListAPI,
    TestAccessDetailAPI,
    TestAccessListAPI,
)
from apps.notifications.api import NoticeDetailAPI, NoticeListAPI, PreferenceAPI
from apps.tickets.api import IncidentDetailAPI, IncidentListAPI, TicketDetailAPI, TicketListAPI
from apps.traffic.api import MemberTrafficAPI, TopTalkersAPI

urlpatterns = [
    path("me/", MeAPI.as_view(), name="api-me"),
    path("system/status/", SystemStatusAPI.as_view(), name="api-system-status"),
    path("members/", MemberListAPI.as_view(), name="api-members"),
    path("members/<int:pk>/", MemberDetailAPI.as_view(), name="api-member"),
    path("members/<int:pk>/data/", MemberDataAPI.as_view(), name="api-member-data"),
    path("me/data/", MemberDataAPI.as_view(), name="api-me-data"),
    path("rooms/", RoomListAPI.as_view(), name="api-rooms"),
    path("rooms/<int:pk>/", RoomDetailAPI.as_view(), name="api-room"),
    path("devices/", DeviceListAPI.as_view(), name="api-devices"),
    path("devices/<int:pk>/", DeviceDetailAPI.as_view(), name="api-device"),
    path("port-forwards/", PortForwardListAPI.as_view(), name="api-port-forwards"),
    path("port-forwards/<int:pk>/", PortForwardDetailAPI.as_view(), name="api-port-forward"),
    path("ipv6-openings/", Ipv6OpeningListAPI.as_view(), name="api-ipv6-openings"),
    path("ipv6-openings/<int:pk>/", Ipv6OpeningDetailAPI.as_view(), name="api-ipv6-opening"),
    path("test-accesses/", TestAccessListAPI.as_view(), name="api-test-accesses"),
    path("test-accesses/<int:pk>/", TestAccessDetailAPI.as_view(), name="api-test-access"),
    path("tickets/", TicketListAPI.as_view(), name="api-tickets"),
    path("tickets/<int:pk>/", TicketDetailAPI.as_view(), name="api-ticket"),
    path("incidents/", IncidentListAPI.as_view(), name="api-incidents"),
    path("incidents/<int:pk>/", IncidentDetailAPI.as_view(), name="api-incident"),
    path("abuse/lookups/", AbuseLookupAPI.as_view(), name="api-abuse-lookup"),
    path("notices/", NoticeListAPI.as_view(), name="api-notices"),
    path("notices/preferences/", PreferenceAPI.as_view(), name="api-notice-preferences"),
    path("notices/<int:pk>/", NoticeDetailAPI.as_view(), name="api-notice"),
    path("members/<int:pk>/traffic/", MemberTrafficAPI.as_view(), name="api-member-traffic"),
    path("traffic/top/", TopTalkersAPI.as_view(), name="api-traffic-top"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script), so the page needs no
    # inline code under the Content-Security-Policy.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
]
