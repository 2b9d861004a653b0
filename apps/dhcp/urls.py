from django.urls import path

from apps.dhcp import views

app_name = "dhcp"
urlpatterns = [
    path("unregistered/", views.UnregisteredView.as_view(), name="unregistered"),
    # Under api/ but no DRF view: anonymous, no token, no session needed (RFC 8908).
    path("api/captive-portal/", views.CaptivePortalApiView.as_view(), name="captive_api"),
]
