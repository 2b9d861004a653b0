from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.firewall.extensions import firewall_extension_register


class HealthConfig(AppConfig):
    name = "apps.health"
    label = "health"
    verbose_name = _("Health")

    def ready(self) -> None:
        # Its part in the firewall pages and the rollout order (apps/firewall/extensions.py);
        # the extension reads models, so it is imported once the registry is ready.
        from apps.health.extension import HealthFirewallExtension

        firewall_extension_register(HealthFirewallExtension())
