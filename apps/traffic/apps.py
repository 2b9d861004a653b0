from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.members.extensions import member_extension_register


class TrafficConfig(AppConfig):
    name = "apps.traffic"
    label = "traffic"
    verbose_name = _("Traffic")

    def ready(self) -> None:
        # Its part in the member's data download and erasure (apps/members/privacy.py); the
        # extension reads models, so it is imported once the registry is ready.
        from apps.traffic.extension import TrafficMemberExtension

        member_extension_register(TrafficMemberExtension())
