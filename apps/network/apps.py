from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.audit.words import profile_label_register
from apps.members.extensions import member_extension_register


class NetworkConfig(AppConfig):
    name = "apps.network"
    label = "network"
    verbose_name = _("Network")

    def ready(self) -> None:
        # the extension reads models: imported once the registry is ready
        from apps.network.extension import NetworkMemberExtension

        member_extension_register(NetworkMemberExtension())
        # Audit's sentences name a shaping profile in network's words (apps/audit/words.py).
        from apps.network.models import shaping_profile_label

        profile_label_register(shaping_profile_label)
