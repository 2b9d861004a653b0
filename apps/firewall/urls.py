from django.urls import path

from apps.firewall import views

app_name = "firewall"
urlpatterns = [
    path("firewalls/", views.FirewallHostListView.as_view(), name="host_list"),
    path("firewalls/push-now/", views.PushNowView.as_view(), name="push_now"),
    path(
        "firewalls/push-now/<slug:request_id>/",
        views.PushOutcomeView.as_view(),
        name="push_outcome",
    ),
    path("firewalls/<slug:name>/", views.FirewallHostDetailView.as_view(), name="host_detail"),
    path("firewalls/<slug:name>/diff/", views.VersionDiffView.as_view(), name="version_diff"),
    path("firewalls/<slug:name>/rollback/", views.RollbackView.as_view(), name="rollback"),
    path("firewalls/<slug:name>/unpin/", views.UnpinView.as_view(), name="unpin"),
    path("firewalls/<slug:name>/resync/", views.StateResyncView.as_view(), name="state_resync"),
]
