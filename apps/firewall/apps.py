from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.network.extensions import network_extension_register


class FirewallConfig(AppConfig):
    name = "apps.firewall"
    label = "firewall"
    verbose_name = _("Firewalls")

    def ready(self) -> None:
        # Its part in network's pages and writes (apps/network/extensions.py); the extension
        # reads models, so it is imported once the registry is ready.
        from apps.firewall.extension import FirewallNetworkExtension

        network_extension_register(FirewallNetworkExtension())
