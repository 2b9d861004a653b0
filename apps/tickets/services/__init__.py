"""Writes of the tickets app: one transaction per action, an audit row, tasks after commit."""

from __future__ import annotations

from apps.tickets.services.helpers import (
    TicketError,
    greeting,
    placeholders_fill,
)
from apps.tickets.services.inbound import (
    ReceivedMail,
    inbound_dismiss,
    inbound_process,
    mail_ingest,
    mail_receive,
    mail_receive_batch,
    queue_default,
    ticket_sender_confirm,
)
from apps.tickets.services.incidents import (
    MassReplyPreview,
    canned_text,
    incident_buildings_add,
    incident_declare,
    incident_edit,
    incident_end,
    incident_mass_reply,
    incident_mass_reply_preview,
    incident_merge,
    incident_tickets_link,
    incident_tickets_solve,
    incident_update_post,
    mass_reply_languages,
    mass_reply_text,
)
from apps.tickets.services.outbound import broadcast_send, message_email, message_send
from apps.tickets.services.tickets import (
    BULK_ACTIONS,
    ticket_member_post,
    ticket_note,
    ticket_open,
    ticket_reply,
    ticket_update,
    tickets_bulk_update,
)

__all__ = [
    "BULK_ACTIONS",
    "MassReplyPreview",
    "ReceivedMail",
    "TicketError",
    "broadcast_send",
    "canned_text",
    "greeting",
    "inbound_dismiss",
    "inbound_process",
    "incident_buildings_add",
    "incident_declare",
    "incident_edit",
    "incident_end",
    "incident_mass_reply",
    "incident_mass_reply_preview",
    "incident_merge",
    "incident_tickets_link",
    "incident_tickets_solve",
    "incident_update_post",
    "mail_ingest",
    "mail_receive",
    "mail_receive_batch",
    "mass_reply_languages",
    "mass_reply_text",
    "message_email",
    "message_send",
    "placeholders_fill",
    "queue_default",
    "ticket_member_post",
    "ticket_note",
    "ticket_open",
    "ticket_reply",
    "ticket_sender_confirm",
    "ticket_update",
    "tickets_bulk_update",
]
