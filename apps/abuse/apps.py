from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AbuseConfig(AppConfig):
    name = "apps.abuse"
    label = "abuse"
    verbose_name = _("Abuse lookup")
