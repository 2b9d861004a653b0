from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.members.extensions import member_extension_register
from apps.network.extensions import network_extension_register


class DhcpConfig(AppConfig):
    name = "apps.dhcp"
    label = "dhcp"
    verbose_name = _("DHCP")

    def ready(self) -> None:
        # Its sections of the office-hours search, the member page and the device rows
        # (apps/members/extensions.py, apps/network/extensions.py); they read models, so they
        # are imported once the registry is ready.
        from apps.dhcp.extension import DhcpMemberExtension, DhcpNetworkExtension

        member_extension_register(DhcpMemberExtension())
        network_extension_register(DhcpNetworkExtension())
