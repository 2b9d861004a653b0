from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.members.extensions import member_extension_register


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"
    verbose_name = _("Notifications")

    def ready(self) -> None:
        # Its part in the member's data download and erasure (apps/members/privacy.py); the
        # extension reads models, so it is imported once the registry is ready.
        from apps.notifications.extension import NotificationsMemberExtension

        member_extension_register(NotificationsMemberExtension())
