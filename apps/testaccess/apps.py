from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.members.extensions import member_extension_register


class TestAccessConfig(AppConfig):
    name = "apps.testaccess"
    label = "testaccess"
    verbose_name = _("Test accesses")

    def ready(self) -> None:
        # the extension reads models: imported once the registry is ready
        from apps.testaccess.extension import TestAccessMemberExtension

        member_extension_register(TestAccessMemberExtension())
