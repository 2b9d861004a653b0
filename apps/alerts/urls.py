from django.urls import path

from apps.alerts import views

app_name = "alerts"
urlpatterns = [
    path("alerts/webhook", views.AlertWebhookView.as_view(), name="webhook"),
    path(
        "staff/alerts/<int:pk>/not-an-outage/",
        views.AlertGroupNotOutageView.as_view(),
        name="group_not_outage",
    ),
    path("staff/alerts/subscription/", views.AlertSubscriptionView.as_view(), name="subscription"),
]
