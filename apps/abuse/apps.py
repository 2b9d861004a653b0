from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.members.extensions import member_extension_register


class AbuseConfig(AppConfig):
    name = "apps.abuse"
    label = "abuse"
    verbose_name = _("Abuse lookup")

    def ready(self) -> None:
        # Its part in the member's data download and erasure (apps/members/privacy.py); the
        # extension reads models, so it is imported once the registry is ready.
        from apps.abuse.extension import AbuseMemberExtension

        member_extension_register(AbuseMemberExtension())
