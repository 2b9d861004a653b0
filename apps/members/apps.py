from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MembersConfig(AppConfig):
    name = "apps.members"
    label = "members"
    verbose_name = _("Members")
