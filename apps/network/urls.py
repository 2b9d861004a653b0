from django.urls import path

from apps.network import views

app_name = "network"
urlpatterns = [
    path(
        "members/<int:member_pk>/devices/", views.DeviceSectionView.as_view(), name="device_section"
    ),
    path("members/<int:member_pk>/devices/add/", views.DeviceAddView.as_view(), name="device_add"),
    path("devices/<int:pk>/edit/", views.DeviceEditView.as_view(), name="device_edit"),
    path("devices/<int:pk>/remove/", views.DeviceRemoveView.as_view(), name="device_remove"),
]
