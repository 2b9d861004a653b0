from django.urls import path

from apps.operations import views
from apps.operations.metrics import healthz_view, metrics_view

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", healthz_view, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
]
