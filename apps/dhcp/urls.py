from django.urls import path

from apps.dhcp import exports, views

app_name = "dhcp"
urlpatterns = [
    path("unregistered/", views.UnregisteredView.as_view(), name="unregistered"),
    path("office-hours/leases.csv", exports.LeaseExportView.as_view(), name="lease_export"),
    # Under api/ but no DRF view: anonymous, no token, no session needed (RFC 8908).
    path("api/captive-portal/", views.CaptivePortalApiView.as_view(), name="captive_api"),
]
