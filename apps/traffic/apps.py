from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TrafficConfig(AppConfig):
    name = "apps.traffic"
    label = "traffic"
    verbose_name = _("Traffic")
