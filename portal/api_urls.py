"""All API routes under /api/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.abuse.api import AbuseLookupAPI
from apps.accounts.api import MeAPI
from apps.firewall.api import (
    FirewallHostListAPI,
    FirewallVersionListAPI,
    PushNowAPI,
    PushOutcomeAPI,
    RollbackAPI,
    StateResyncAPI,
    UnpinAPI,
)
from apps.health.api import SystemStatusAPI
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
from apps.network.api import (
    DeviceDetailAPI,
    DeviceListAPI,
    Ipv6OpeningDetailAPI,
    Ipv6OpeningListAPI,
    Ipv6OpeningProbeAPI,
    PortForwardDetailAPI,
    PortForwardListAPI,
    PortForwardProbeAPI,
)
from apps.notifications.api import NoticeDetailAPI, NoticeListAPI, PreferenceAPI
from apps.testaccess.api import TestAccessDetailAPI, TestAccessListAPI
from apps.tickets.api import (
    IncidentDetailAPI,
    IncidentListAPI,
    IncidentTicketsAPI,
    IncidentTicketUnlinkAPI,
    IncidentUpdateAPI,
    QuarantineDismissAPI,
    QuarantineListAPI,
    QuarantineRetryAPI,
    TicketBulkAPI,
    TicketDetailAPI,
    TicketListAPI,
    TicketUpdateAPI,
)
from apps.traffic.api import MemberTrafficAPI, TopTalkersAPI

urlpatterns = [
    path("me/", MeAPI.as_view(), name="api-me"),
    path("system/status/", SystemStatusAPI.as_view(), name="api-system-status"),
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
    path("devices/", DeviceListAPI.as_view(), name="api-devices"),
    path("devices/<int:pk>/", DeviceDetailAPI.as_view(), name="api-device"),
    path("port-forwards/", PortForwardListAPI.as_view(), name="api-port-forwards"),
    path("port-forwards/<int:pk>/", PortForwardDetailAPI.as_view(), name="api-port-forward"),
    path(
        "port-forwards/<int:pk>/test/", PortForwardProbeAPI.as_view(), name="api-port-forward-test"
    ),
    path("ipv6-openings/", Ipv6OpeningListAPI.as_view(), name="api-ipv6-openings"),
    path("ipv6-openings/<int:pk>/", Ipv6OpeningDetailAPI.as_view(), name="api-ipv6-opening"),
    path(
        "ipv6-openings/<int:pk>/test/", Ipv6OpeningProbeAPI.as_view(), name="api-ipv6-opening-test"
    ),
    path("test-accesses/", TestAccessListAPI.as_view(), name="api-test-accesses"),
    path("test-accesses/<int:pk>/", TestAccessDetailAPI.as_view(), name="api-test-access"),
    path("tickets/", TicketListAPI.as_view(), name="api-tickets"),
    path("tickets/<int:pk>/", TicketDetailAPI.as_view(), name="api-ticket"),
    path("tickets/bulk/", TicketBulkAPI.as_view(), name="api-tickets-bulk"),
    path("quarantine/", QuarantineListAPI.as_view(), name="api-quarantine"),
    path("quarantine/<int:pk>/retry/", QuarantineRetryAPI.as_view(), name="api-quarantine-retry"),
    path(
        "quarantine/<int:pk>/dismiss/",
        QuarantineDismissAPI.as_view(),
        name="api-quarantine-dismiss",
    ),
    path("tickets/<int:pk>/fields/", TicketUpdateAPI.as_view(), name="api-ticket-fields"),
    path("incidents/", IncidentListAPI.as_view(), name="api-incidents"),
    path("incidents/<int:pk>/", IncidentDetailAPI.as_view(), name="api-incident"),
    path("incidents/<int:pk>/updates/", IncidentUpdateAPI.as_view(), name="api-incident-updates"),
    path("incidents/<int:pk>/tickets/", IncidentTicketsAPI.as_view(), name="api-incident-tickets"),
    path(
        "incidents/<int:pk>/tickets/<int:ticket>/",
        IncidentTicketUnlinkAPI.as_view(),
        name="api-incident-ticket",
    ),
    path("firewalls/", FirewallHostListAPI.as_view(), name="api-firewalls"),
    path("firewalls/push-now/", PushNowAPI.as_view(), name="api-firewall-push-now"),
    path(
        "firewalls/push-now/<slug:request_id>/",
        PushOutcomeAPI.as_view(),
        name="api-firewall-push-outcome",
    ),
    path(
        "firewalls/<slug:name>/versions/",
        FirewallVersionListAPI.as_view(),
        name="api-firewall-versions",
    ),
    path("firewalls/<slug:name>/rollback/", RollbackAPI.as_view(), name="api-firewall-rollback"),
    path("firewalls/<slug:name>/unpin/", UnpinAPI.as_view(), name="api-firewall-unpin"),
    path("firewalls/<slug:name>/resync/", StateResyncAPI.as_view(), name="api-firewall-resync"),
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
