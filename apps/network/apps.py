from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NetworkConfig(AppConfig):
    name = "apps.network"
    label = "network"
    verbose_name = _("Network")
