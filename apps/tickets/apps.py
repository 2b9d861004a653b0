from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from apps.audit.words import detail_words_register
from apps.health.signals import public_face_changed
from apps.members.extensions import member_extension_register
from apps.notifications.subjects import incident_reader_register


class TicketsConfig(AppConfig):
    name = "apps.tickets"
    label = "tickets"
    verbose_name = _("Support")

    def ready(self) -> None:
        # Its part in the member's data download and erasure (apps/members/privacy.py); the
        # extension reads models, so it is imported once the registry is ready.
        from apps.tickets.extension import TicketsMemberExtension

        member_extension_register(TicketsMemberExtension())
        # Audit's sentences word a ticket update in the tickets app's words (apps/audit/words.py).
        from apps.tickets.history import update_sentences

        detail_words_register("ticket.update", update_sentences)
        # An incident's notices are made by the notifications app from what it reads here.
        from apps.tickets.selectors import incident_facts_read

        incident_reader_register(incident_facts_read)
        # A failover or a host lost (apps/health/signals.py): the status page says so at once.
        from apps.tickets import status  # it reads models too

        public_face_changed.connect(status.public_face_refresh, dispatch_uid="tickets.status")
        # A changed status page is published off-site (apps/tickets/publish.py).
        from apps.tickets import publish  # it reads models too

        status.status_changed.connect(
            publish.status_changed_receiver, dispatch_uid="tickets.publish"
        )
