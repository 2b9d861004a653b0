from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.firewall.extensions import firewall_extension_register
from apps.members.extensions import member_extension_register
from apps.network.extensions import network_extension_register


class DhcpConfig(AppConfig):
    name = "apps.dhcp"
    label = "dhcp"
    verbose_name = _("DHCP")

    def ready(self) -> None:
        # Its sections of the office-hours search, the member page and the device rows, and the
        # DHCP part of the firewall snapshot (apps/members/extensions.py, network/extensions.py,
        # firewall/extensions.py); they read models, so they are imported once the registry is
        # ready.
        from apps.dhcp import extension

        member_extension_register(extension.DhcpMemberExtension())
        network_extension_register(extension.DhcpNetworkExtension())
        firewall_extension_register(extension.DhcpFirewallExtension())
