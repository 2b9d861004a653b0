"""The API routes of tickets (under /api/, included by portal/api_urls.py)."""

from django.urls import path

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

urlpatterns = [
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
]
