"""The ticket's history as sentences in the reader's language.

The services write each event as an action name and a short technical detail
(`ticket.update` / "status=solved; assignee=sta", `ticket.incident_link` / "auto (building): Outage
A"); this module reads them back as words ("Anna Meier set the status to Solved"), so the history
beside a ticket and the audit trail's details never show a raw action or field name.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.tickets.choices import TicketStatus

__all__ = ["event_sentence", "update_sentences"]

# One template per action; `{actor}` is who did it, `{detail}` the recorded detail.
EVENT_SENTENCES: dict[str, Promise] = {
    "ticket.create:mail": gettext_lazy("The ticket came in by mail"),
    "ticket.create:portal": gettext_lazy("{actor} opened the ticket in the portal"),
    "ticket.create": gettext_lazy("{actor} opened the ticket"),
    "ticket.mail_reply": gettext_lazy("A mail from the requester was added"),
    "ticket.mail_reply:automatic": gettext_lazy(
        "An automatic mail was added (not answered automatically: {detail})"
    ),
    "ticket.member_post": gettext_lazy("{actor} wrote a message"),
    "ticket.reply": gettext_lazy("{actor} replied"),
    "ticket.note": gettext_lazy("{actor} added an internal note"),
    "ticket.sender_confirm": gettext_lazy("{actor} confirmed that the mail came from the member"),
    "ticket.mass_reply": gettext_lazy(
        "{actor} answered with the reply to every ticket of the incident “{detail}”"
    ),
    "ticket.incident_link": gettext_lazy("{actor} linked the ticket to the incident “{detail}”"),
    "ticket.incident_link:unlink": gettext_lazy("{actor} unlinked the ticket from its incident"),
    "ticket.incident_link:building": gettext_lazy(
        "The portal linked the ticket to the incident “{detail}” (the member's building is affected)"
    ),
    "ticket.incident_link:keywords": gettext_lazy(
        "The portal linked the ticket to the incident “{detail}” (its words match)"
    ),
    "ticket.incident_link:auto": gettext_lazy(
        "The portal linked the ticket to the incident “{detail}”"
    ),
}

# The parts of a `ticket.update` detail ("status=solved; assignee=sta"), set and cleared.
UPDATE_SENTENCES: dict[str, tuple[Promise, Promise | None]] = {
    "status": (gettext_lazy("{actor} set the status to {value}"), None),
    "assignee": (
        gettext_lazy("{actor} assigned the ticket to {value}"),
        gettext_lazy("{actor} removed the assignee"),
    ),
    "queue": (
        gettext_lazy("{actor} moved the ticket to the queue {value}"),
        gettext_lazy("{actor} took the ticket out of its queue"),
    ),
    "tags": (
        gettext_lazy("{actor} set the tags to {value}"),
        gettext_lazy("{actor} removed all tags"),
    ),
    "incident": (
        gettext_lazy("{actor} linked the ticket to incident #{value}"),
        gettext_lazy("{actor} unlinked the ticket from its incident"),
    ),
}
SOLVED_WITH_INCIDENT = gettext_lazy("{actor} marked the ticket solved together with its incident")
UNKNOWN = gettext_lazy("{actor} changed the ticket ({detail})")

_AUTO_LINK = re.compile(r"^auto(?: \((?P<reason>\w+)\))?: (?P<title>.*)$", re.DOTALL)


def _actor(user: Any) -> str:
    if user is None:
        return _("The portal")
    return user.get_full_name() or user.get_username()


def _status_label(value: str) -> str:
    try:
        return str(TicketStatus(value).label)
    except ValueError:
        return value


def update_sentences(detail: str, *, actor: str) -> list[SafeString]:
    """The sentences of one `ticket.update` detail, one per changed field."""
    sentences: list[SafeString] = []
    for part in (p.strip() for p in detail.split(";")):
        if not part:
            continue
        field, sep, value = part.partition("=")
        if field == "status" and value.endswith(" (incident)"):
            sentences.append(format_html(str(SOLVED_WITH_INCIDENT), actor=actor))
            continue
        if not sep or field not in UPDATE_SENTENCES:
            sentences.append(format_html(str(UNKNOWN), actor=actor, detail=part))
            continue
        set_text, cleared = UPDATE_SENTENCES[field]
        if value in ("", "-") and cleared is not None:
            sentences.append(format_html(str(cleared), actor=actor))
            continue
        if field == "status":
            value = _status_label(value)
        elif field == "tags":
            value = ", ".join(value.split(","))
        sentences.append(format_html(str(set_text), actor=actor, value=value))
    return sentences


def _template_key(action: str, detail: str) -> tuple[str, str]:
    """(registry key, the detail the sentence shows) for one event."""
    if action == "ticket.create" and detail in ("mail", "portal"):
        return f"{action}:{detail}", ""
    if action == "ticket.mail_reply" and detail:
        return f"{action}:automatic", detail
    if action == "ticket.incident_link":
        if detail in ("", "-"):
            return f"{action}:unlink", ""
        auto = _AUTO_LINK.match(detail)
        if auto:
            reason = auto["reason"] if auto["reason"] in ("building", "keywords") else "auto"
            return f"{action}:{reason}", auto["title"]
    return action, detail


def event_sentence(event: Any) -> SafeString:
    """One history event as words: "Anna Meier set the status to Solved"."""
    actor = _actor(event.actor)
    if event.action == "ticket.update":
        parts = update_sentences(event.detail, actor=actor)
        return format_html_join(". ", "{}", ((p,) for p in parts))
    key, detail = _template_key(event.action, event.detail)
    template = EVENT_SENTENCES.get(key)
    if template is None:
        what = event.action.replace(".", " ").replace("_", " ")
        return format_html(str(UNKNOWN), actor=actor, detail=f"{what} {event.detail}".strip())
    return format_html(str(template), actor=actor, detail=detail)
