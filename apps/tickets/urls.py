from django.urls import path

from apps.tickets import exports, incident_views, member_views, views

app_name = "tickets"
urlpatterns = [
    path("support/tickets/", views.InboxView.as_view(), name="inbox"),
    path("support/tickets.csv", exports.TicketExportView.as_view(), name="ticket_export"),
    path("support/tickets/<int:pk>/", views.TicketDetailView.as_view(), name="ticket_detail"),
    path("support/tickets/<int:pk>/reply/", views.TicketReplyView.as_view(), name="ticket_reply"),
    path("support/tickets/<int:pk>/note/", views.TicketNoteView.as_view(), name="ticket_note"),
    path(
        "support/tickets/<int:pk>/update/", views.TicketUpdateView.as_view(), name="ticket_update"
    ),
    path(
        "support/tickets/<int:pk>/confirm-sender/",
        views.TicketSenderConfirmView.as_view(),
        name="ticket_confirm_sender",
    ),
    path("support/tickets/<int:pk>/canned/", views.CannedFillView.as_view(), name="canned_fill"),
    path("support/incidents/", incident_views.IncidentListView.as_view(), name="incident_list"),
    path(
        "support/incidents/<int:pk>/",
        incident_views.IncidentDetailView.as_view(),
        name="incident_detail",
    ),
    path(
        "support/incidents/<int:pk>/update/",
        incident_views.IncidentUpdateView.as_view(),
        name="incident_update",
    ),
    path(
        "support/incidents/<int:pk>/mass-reply/",
        incident_views.IncidentMassReplyView.as_view(),
        name="incident_mass_reply",
    ),
    path(
        "support/incidents/<int:pk>/link/",
        incident_views.IncidentLinkView.as_view(),
        name="incident_link",
    ),
    path(
        "support/incidents/<int:pk>/unlink/",
        incident_views.IncidentUnlinkView.as_view(),
        name="incident_unlink",
    ),
    path(
        "support/incidents/<int:pk>/solve/",
        incident_views.IncidentSolveView.as_view(),
        name="incident_solve",
    ),
    path(
        "support/incidents/<int:pk>/end/",
        incident_views.IncidentEndView.as_view(),
        name="incident_end",
    ),
    path(
        "support/incidents/<int:pk>/edit/",
        incident_views.IncidentEditView.as_view(),
        name="incident_edit",
    ),
    path(
        "support/incidents/<int:pk>/merge/",
        incident_views.IncidentMergeView.as_view(),
        name="incident_merge",
    ),
    path("support/quarantine/", views.QuarantineView.as_view(), name="quarantine"),
    path("support/quarantine/retry/", views.QuarantineRetryView.as_view(), name="quarantine_retry"),
    path(
        "support/quarantine/dismiss/",
        views.QuarantineDismissView.as_view(),
        name="quarantine_dismiss",
    ),
    path("support/stats/", views.StatsView.as_view(), name="stats"),
    path("attachments/<int:pk>/", views.AttachmentView.as_view(), name="attachment"),
    path("tickets/", member_views.MyTicketListView.as_view(), name="my_tickets"),
    path("tickets/<int:pk>/", member_views.MyTicketDetailView.as_view(), name="my_ticket"),
    path("status/", member_views.StatusPageView.as_view(), name="status_page"),
]
