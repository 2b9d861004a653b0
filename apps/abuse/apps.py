from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.dhcp import signals as dhcp_signals
from apps.members.extensions import member_extension_register
from apps.network import signals as network_signals


class AbuseConfig(AppConfig):
    name = "apps.abuse"
    label = "abuse"
    verbose_name = _("Abuse lookup")

    def ready(self) -> None:
        # Its part in the member's data download and erasure (apps/members/privacy.py); the
        # extension reads models, so it is imported once the registry is ready.
        from apps.abuse.extension import AbuseMemberExtension

        member_extension_register(AbuseMemberExtension())
        # Addresses given and taken back below (network, dhcp) start and end its holdings.
        from apps.abuse import receivers  # it reads models too

        for signal, receiver in (
            (network_signals.public_ipv4_assigned, receivers.public_ipv4_assigned),
            (network_signals.public_ipv4_quarantined, receivers.public_ipv4_quarantined),
            (network_signals.device_addresses_changed, receivers.device_addresses_changed),
            (dhcp_signals.registration_leases_seen, receivers.registration_leases_seen),
        ):
            signal.connect(receiver, dispatch_uid=f"abuse.{receiver.__name__}")
