from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TestAccessConfig(AppConfig):
    name = "apps.testaccess"
    label = "testaccess"
    verbose_name = _("Test accesses")
