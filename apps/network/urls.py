from django.urls import path

from apps.network import exports, views

app_name = "network"
urlpatterns = [
    path("office-hours/devices.csv", exports.DeviceExportView.as_view(), name="device_export"),
    path("live/<str:kind>/<int:pk>/", views.LiveStateView.as_view(), name="live_state"),
    path(
        "members/<int:member_pk>/devices/", views.DeviceSectionView.as_view(), name="device_section"
    ),
    path("members/<int:member_pk>/devices/add/", views.DeviceAddView.as_view(), name="device_add"),
    path("devices/<int:pk>/edit/", views.DeviceEditView.as_view(), name="device_edit"),
    path("devices/<int:pk>/remove/", views.DeviceRemoveView.as_view(), name="device_remove"),
    # port forwards
    path(
        "members/<int:member_pk>/port-forwards/",
        views.ForwardSectionView.as_view(),
        name="forward_section",
    ),
    path(
        "members/<int:member_pk>/port-forwards/add/",
        views.ForwardAddView.as_view(),
        name="forward_add",
    ),
    path("port-forwards/<int:pk>/edit/", views.ForwardEditView.as_view(), name="forward_edit"),
    path(
        "port-forwards/<int:pk>/toggle/", views.ForwardToggleView.as_view(), name="forward_toggle"
    ),
    path("port-forwards/<int:pk>/test/", views.ForwardProbeView.as_view(), name="forward_probe"),
    path("ipv6-openings/<int:pk>/test/", views.OpeningProbeView.as_view(), name="opening_probe"),
    path(
        "port-forwards/<int:pk>/delete/", views.ForwardDeleteView.as_view(), name="forward_delete"
    ),
    # IPv6 openings
    path(
        "members/<int:member_pk>/ipv6-openings/",
        views.OpeningSectionView.as_view(),
        name="opening_section",
    ),
    path(
        "members/<int:member_pk>/ipv6-openings/add/",
        views.OpeningAddView.as_view(),
        name="opening_add",
    ),
    path("ipv6-openings/<int:pk>/edit/", views.OpeningEditView.as_view(), name="opening_edit"),
    path(
        "ipv6-openings/<int:pk>/toggle/", views.OpeningToggleView.as_view(), name="opening_toggle"
    ),
    path(
        "ipv6-openings/<int:pk>/delete/", views.OpeningDeleteView.as_view(), name="opening_delete"
    ),
]
