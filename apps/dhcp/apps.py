from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DhcpConfig(AppConfig):
    name = "apps.dhcp"
    label = "dhcp"
    verbose_name = _("DHCP")
