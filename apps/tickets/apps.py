from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.health.signals import public_face_changed


class TicketsConfig(AppConfig):
    name = "apps.tickets"
    label = "tickets"
    verbose_name = _("Support")

    def ready(self) -> None:
        from apps.tickets import status  # it reads models: importable once the registry is ready

        # A failover or a host lost (apps/health/signals.py): the status page says so at once.
        public_face_changed.connect(status.public_face_refresh, dispatch_uid="tickets.status")
