from django.urls import path

from apps.tickets import exports, views

app_name = "tickets"
urlpatterns = [
    path("support/tickets/", views.InboxView.as_view(), name="inbox"),
    path("support/tickets.csv", exports.TicketExportView.as_view(), name="ticket_export"),
    path("support/tickets/<int:pk>/", views.TicketDetailView.as_view(), name="ticket_detail"),
    path("support/tickets/<int:pk>/canned/", views.CannedFillView.as_view(), name="canned_fill"),
    path("support/incidents/", views.IncidentListView.as_view(), name="incident_list"),
    path("support/incidents/<int:pk>/", views.IncidentDetailView.as_view(), name="incident_detail"),
    path("support/quarantine/", views.QuarantineView.as_view(), name="quarantine"),
    path("support/stats/", views.StatsView.as_view(), name="stats"),
    path("attachments/<int:pk>/", views.AttachmentView.as_view(), name="attachment"),
    path("tickets/", views.MyTicketListView.as_view(), name="my_tickets"),
    path("tickets/<int:pk>/", views.MyTicketDetailView.as_view(), name="my_ticket"),
    path("status/", views.StatusPageView.as_view(), name="status_page"),
]
