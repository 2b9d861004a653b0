"""The API routes of network (under /api/, included by portal/api_urls.py)."""

from django.urls import path

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

urlpatterns = [
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
]
