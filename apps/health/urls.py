from django.urls import path

from apps.health import views

app_name = "health"
urlpatterns = [
    path("system/", views.SystemStatusView.as_view(), name="system"),
]
