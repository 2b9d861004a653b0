from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FirewallConfig(AppConfig):
    name = "apps.firewall"
    label = "firewall"
    verbose_name = _("Firewalls")
