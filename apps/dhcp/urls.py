from django.urls import path

from apps.dhcp import views

app_name = "dhcp"
urlpatterns = [
    path("unregistered/", views.UnregisteredView.as_view(), name="unregistered"),
]
