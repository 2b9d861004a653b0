from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NetworkConfig(AppConfig):
    name = "apps.network"
    label = "network"
    verbose_name = _("Network")

    def ready(self) -> None:
        from apps.members.extensions import member_extension_register
        from apps.network.extension import NetworkMemberExtension

        member_extension_register(NetworkMemberExtension())
