"""What the audit trail and the rule-set versions' causes say, as sentences in the reader's language.

One registry, `SENTENCES`, maps every action name the services write (`member.test_access_extend`,
`device.remove`...) to gettext templates. A template names its values in braces: `{actor}` (who),
`{object}` (what, linked to its page when it has one) and, from the entry's recorded changes,
`{new_<field>}` / `{old_<field>}` (dates shown in the reader's locale). An action may list several
templates: the first whose values are all recorded is used (an extension that changed only the
speed has no new end date). `member.active:from_suspended` style keys pick a template by the old
status. Actions of the generic policy writes (`blockedport.create`) are read by their verb.
An action nobody registered still reads as a sentence ("… made a change to …"), and
tests/integration/audit/test_sentences.py fails for every action written in the code without one.

Version causes are the strings the network hook records ("device.remove 167, port_forward.create
12 (by sta); push now (by ada)"); `cause_sentences` reads them with the same registry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import formats, timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from apps.audit.words import detail_words, profile_label

__all__ = [
    "GENERIC_VERBS",
    "SENTENCES",
    "audit_sentence",
    "cause_sentences",
    "change_rows",
    "sentence_for",
]


SENTENCES: dict[str, tuple[Promise, ...]] = {
    # Sign-in (the second step) and personal data
    "account.second_factor_enable": (gettext_lazy("{actor} turned on the second sign-in step"),),
    "account.second_factor_disable": (gettext_lazy("{actor} turned off the second sign-in step"),),
    "account.recovery_codes_regenerate": (gettext_lazy("{actor} made new recovery codes"),),
    "account.second_factor_failed": (gettext_lazy("{actor} gave a wrong sign-in code"),),
    "account.second_factor_locked": (
        gettext_lazy("{actor} gave too many wrong sign-in codes: locked until {new_locked_until}"),
        gettext_lazy("{actor} gave too many wrong sign-in codes: locked for a while"),
    ),
    "member.data_export": (gettext_lazy("{actor} downloaded the personal data of {object}"),),
    "member.erase": (
        gettext_lazy("The personal data of {object} was erased (end of the retention period)"),
    ),
    # Membership
    "member.sign_up": (gettext_lazy("{object} signed up online"),),
    "member.register": (
        gettext_lazy("{actor} registered {object} in {new_room}"),
        gettext_lazy("{actor} registered {object}"),
    ),
    "member.contact": (gettext_lazy("{actor} changed the contact details of {object}"),),
    "member.active": (gettext_lazy("{actor} checked in {object}"),),
    "member.active:from_suspended": (gettext_lazy("{actor} lifted the suspension of {object}"),),
    "member.check_in": (gettext_lazy("{actor} checked in {object}"),),
    "member.test": (
        gettext_lazy("{actor} granted {object} a test access until {new_test_access_until}"),
        gettext_lazy("{actor} granted {object} a test access"),
    ),
    "member.test_access": (gettext_lazy("{actor} granted {object} a test access"),),
    "member.test_access_extend": (
        gettext_lazy("{actor} extended the test access of {object} until {new_test_access_until}"),
        gettext_lazy("{actor} changed the speed of the test access of {object} to {new_profile}"),
        gettext_lazy("{actor} changed the test access of {object}"),
    ),
    "member.test_access_profile": (
        gettext_lazy("{actor} set the speed of the test access of {object} to {new_profile}"),
    ),
    "member.test_access_notice": (
        gettext_lazy(
            "{object} was told by mail that the test access ends on {new_notice_sent_for}"
        ),
    ),
    "member.pending": (gettext_lazy("{actor} ended the test access of {object}"),),
    "member.test_access_end": (gettext_lazy("{actor} ended the test access of {object}"),),
    "member.suspended": (
        gettext_lazy("{actor} suspended {object}: {new_note}"),
        gettext_lazy("{actor} suspended {object}"),
    ),
    "member.suspend": (gettext_lazy("{actor} suspended {object}"),),
    "member.ended": (gettext_lazy("{actor} ended the membership of {object}"),),
    "member.end": (gettext_lazy("{actor} ended the membership of {object}"),),
    "member.move": (
        gettext_lazy("{actor} moved {object} from {old_room} to {new_room}"),
        gettext_lazy("{actor} moved {object} to {new_room}"),
        gettext_lazy("{actor} moved {object}"),
    ),
    "building.create": (gettext_lazy("{actor} added the building {object}"),),
    "room.create": (gettext_lazy("{actor} added the room {object}"),),
    # Devices and addresses
    "device.add": (gettext_lazy("{actor} added the device {object}"),),
    "device.change": (gettext_lazy("{actor} changed the device {object}"),),
    "device.readdress": (gettext_lazy("{actor} gave the device {object} new addresses"),),
    "device.remove": (gettext_lazy("{actor} removed the device {object}"),),
    "public_ipv4.assign": (gettext_lazy("{actor} assigned the public address {object}"),),
    "public_ipv4.quarantine": (
        gettext_lazy("{actor} put the public address {object} into quarantine"),
    ),
    "publicpool.create": (gettext_lazy("{actor} added the address pool {object}"),),
    "subnet.create": (gettext_lazy("{actor} added the subnet {object}"),),
    "port_forward.create": (gettext_lazy("{actor} added the port forward {object}"),),
    "port_forward.delete": (gettext_lazy("{actor} deleted the port forward {object}"),),
    "port_forward.release": (gettext_lazy("{actor} released the port forward {object}"),),
    "ipv6_opening.create": (gettext_lazy("{actor} opened {object} on IPv6"),),
    "ipv6_opening.delete": (gettext_lazy("{actor} closed the IPv6 opening {object}"),),
    # Firewalls
    "firewall.pin": (gettext_lazy("{actor} pinned {object} to an older version"),),
    "firewall.unpin": (gettext_lazy("{actor} unpinned {object}"),),
    "firewall.push_now": (gettext_lazy("{actor} pushed the rule sets now"),),
    "firewall.state_resync": (
        gettext_lazy("{actor} resynchronised the connection state of {object}"),
    ),
    # Notices and abuse
    "notice.incident": (gettext_lazy("{object} was told about an incident"),),
    "notice.preferences": (gettext_lazy("{actor} changed the notice preferences of {object}"),),
    "notice.live_on_time": (gettext_lazy("{object} went live on the firewalls in time"),),
    "notice.live_late": (gettext_lazy("{object} went live on the firewalls, but late"),),
    "notice.live_failed": (gettext_lazy("{object} could not be put live on the firewalls"),),
    "notice.live_off": (gettext_lazy("{object} is not in force on the firewalls"),),
    # CSV downloads of the staff tables (apps/members/exports.py, apps/tickets/exports.py)
    "export.members": (
        gettext_lazy("{actor} downloaded the members as CSV, filtered by {new_filter}"),
        gettext_lazy("{actor} downloaded all members as CSV"),
    ),
    "export.devices": (
        gettext_lazy("{actor} downloaded the devices as CSV, filtered by {new_filter}"),
        gettext_lazy("{actor} downloaded all devices as CSV"),
    ),
    "export.leases": (
        gettext_lazy("{actor} downloaded the DHCP leases as CSV, filtered by {new_filter}"),
        gettext_lazy("{actor} downloaded all DHCP leases as CSV"),
    ),
    "export.tickets": (
        gettext_lazy("{actor} downloaded the tickets as CSV, filtered by {new_filter}"),
        gettext_lazy("{actor} downloaded all tickets as CSV"),
    ),
    "abuse.lookup": (gettext_lazy("{actor} looked up who held {object}"),),
    # Tickets and incidents
    "ticket.create": (gettext_lazy("{actor} opened the ticket {object}"),),
    "ticket.update": (gettext_lazy("{actor} changed the ticket {object}"),),
    "ticket.reply": (gettext_lazy("{actor} replied to {object}"),),
    "ticket.note": (gettext_lazy("{actor} added a note to {object}"),),
    "ticket.member_post": (gettext_lazy("{actor} wrote on {object}"),),
    "ticket.mail_reply": (gettext_lazy("A mail was added to {object}"),),
    "ticket.mass_reply": (gettext_lazy("{actor} answered {object} with a reply to all"),),
    "ticket.sender_confirm": (
        gettext_lazy("{actor} confirmed that the mail of {object} came from its member"),
    ),
    "ticket.incident_link": (gettext_lazy("{actor} linked {object} to an incident"),),
    "incident.declare": (gettext_lazy("{actor} declared the incident {object}"),),
    "incident.update": (gettext_lazy("{actor} published an update on {object}"),),
    "incident.mass_reply": (gettext_lazy("{actor} replied to every ticket of {object}"),),
    "incident.solve_tickets": (gettext_lazy("{actor} marked the tickets of {object} solved"),),
    "incident.end": (gettext_lazy("{actor} ended the incident {object}"),),
    "incident.edit": (gettext_lazy("{actor} edited the incident {object}"),),
    "incident.merge": (gettext_lazy("{actor} merged an incident into {object}"),),
    "incident.buildings_add": (gettext_lazy("{actor} added buildings to the incident {object}"),),
    "alert.fire": (gettext_lazy("The monitoring raised the alert {object}"),),
    "alert.resolve": (gettext_lazy("The monitoring resolved the alert {object}"),),
    "alert.incident_open": (gettext_lazy("The monitoring opened the incident {object}"),),
    "alert.incident_join": (
        gettext_lazy("The monitoring added an alert to the incident {object}"),
    ),
    "alert.incident_again": (gettext_lazy("The monitoring saw the problem of {object} again"),),
    "alert.working_again": (gettext_lazy("The monitoring sees {object} working again"),),
    "alert.not_outage": (gettext_lazy("{actor} marked the alert {object} as not an outage"),),
    "mail.quarantine": (gettext_lazy("The mail {object} was put into quarantine"),),
    "mail.dismiss": (gettext_lazy("{actor} dismissed the quarantined mail {object}"),),
}

# The generic writes of policy rows and admin edits (`<model>.create`, `<model>.save`...).
# `{thing}` is the object as the verb's object: with its article and, in German, in the
# accusative ("den gesperrten Portbereich #12"), which "{type} {object}" cannot give.
GENERIC_VERBS: dict[str, Promise] = {
    "create": gettext_lazy("{actor} added {thing}"),
    "change": gettext_lazy("{actor} changed {thing}"),
    "save": gettext_lazy("{actor} changed {thing}"),
    "delete": gettext_lazy("{actor} deleted {thing}"),
    "probe": gettext_lazy("{actor} tested whether {object} is reachable from the Internet"),
}
FALLBACK = gettext_lazy("{actor} made a change to {object} ({what})")

# `{thing}` of the models edited in the admin or as policy; one-row settings have no name.
THINGS: dict[str, Promise] = {
    "blockedport": pgettext_lazy("audit object", "the blocked port range {object}"),
    "building": pgettext_lazy("audit object", "the building {object}"),
    "cannedresponse": pgettext_lazy("audit object", "the canned response {object}"),
    "dhcpsettings": pgettext_lazy("audit object", "the DHCP settings"),
    "firewallhost": pgettext_lazy("audit object", "the firewall host {object}"),
    "managementnetwork": pgettext_lazy("audit object", "the management network {object}"),
    "networksettings": pgettext_lazy("audit object", "the network settings"),
    "publicpool": pgettext_lazy("audit object", "the address pool {object}"),
    "queue": pgettext_lazy("audit object", "the queue {object}"),
    "registrationrange": pgettext_lazy("audit object", "the registration range {object}"),
    "shapingprofile": pgettext_lazy("audit object", "the shaping profile {object}"),
    "site": pgettext_lazy("audit object", "the site {object}"),
}
# Any other model: its type beside the name, or alone when the entry recorded no name.
THING_NAMED = pgettext_lazy("audit object", "the {type} {object}")
THING_UNNAMED = pgettext_lazy("audit object", "an entry of the type {type}")

# Object types whose entries link to the member's page (their own pages are the member's).
MEMBER_TYPES = {"member", "device", "portforward", "ipv6opening", "publicipv4", "preference"}


def _value(value: Any) -> str:
    """A recorded value as the reader reads it: dates in their locale ("3 Dec"), lists joined."""
    if value is None or value == "":
        raise KeyError("not recorded")
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, str):
        try:
            moment = parse_datetime(value) if "T" in value or " " in value else None
            day = parse_date(value) if moment is None and len(value) == 10 else None
        except ValueError:  # shaped like a date, but none
            moment = day = None
        if moment is not None or day is not None:
            return _date_text(moment or day)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _shown_value(name: str, value: Any) -> str:
    if name.endswith("profile") and isinstance(value, str):
        label = profile_label(value)  # network's words (words.py)
        if label is not None:
            return label
    return _value(value)


def _date_text(value: date | datetime) -> str:
    if isinstance(value, datetime):
        value = timezone.localtime(value) if timezone.is_aware(value) else value
        value = value.date()
    # Translators: date formats (Django's date syntax) of a day inside a sentence.
    pattern = _("j M") if value.year == timezone.localdate().year else _("j M Y")
    return formats.date_format(value, pattern)


def _link(url: str | None, text: str) -> SafeString:
    if url:
        return format_html('<a href="{}">{}</a>', url, text)
    return format_html("{}", text)


def _url(name: str, *args: Any) -> str | None:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


def _object_url(model: str, object_id: str, text: str, member_id: int | None) -> str | None:
    if model == "member":
        return _url("members:member_detail", int(object_id))
    if model in MEMBER_TYPES and member_id:
        return _url("members:member_detail", member_id)
    if model == "firewallhost":
        return _url("firewall:host_detail", text)
    if model == "ticket":
        return _url("tickets:ticket_detail", int(object_id))
    if model == "incident":
        return _url("tickets:incident_detail", int(object_id))
    return None


def _templates(action: str, old_status: Any = None) -> tuple[Promise, ...]:
    if old_status and f"{action}:from_{old_status}" in SENTENCES:
        return SENTENCES[f"{action}:from_{old_status}"]
    if action in SENTENCES:
        return SENTENCES[action]
    verb = action.rpartition(".")[2]
    if verb in GENERIC_VERBS:
        return (GENERIC_VERBS[verb],)
    return ()


def sentence_for(
    action: str,
    *,
    actor: str,
    obj: SafeString,
    kind: str = "",
    model: str = "",
    changes: Mapping[str, Any] | None = None,
) -> SafeString:
    """One sentence for `action`: the first template whose values are recorded, else the
    fallback (which always reads as a sentence). `kind` is the type's name in the reader's
    language, `model` its model name (`blockedport`)."""
    values: dict[str, Any] = {
        "actor": actor,
        "object": obj,
        "type": kind,
        "thing": _thing(model, kind=kind, obj=obj),
    }
    raw: dict[str, Any] = {}
    for field, pair in (changes or {}).items():
        if isinstance(pair, list | tuple) and len(pair) == 2:
            raw[f"old_{field}"], raw[f"new_{field}"] = pair
    old_status = raw.get("old_status")
    for template in _templates(action, old_status):
        names = set(re.findall(r"\{(\w+)\}", str(template)))
        try:
            extra = {name: _shown_value(name, raw[name]) for name in names - set(values)}
        except KeyError:
            continue
        return format_html(str(template), **values, **extra)
    what = action.replace(".", " ").replace("_", " ")
    return format_html(str(FALLBACK), **values, what=what)


def _thing(model: str, *, kind: str, obj: SafeString) -> SafeString:
    """The object of a generic verb: "the firewall host pl-nat1", "den Firewall-Host pl-nat1"."""
    if model in THINGS:
        template = THINGS[model]
    else:
        template = THING_NAMED if str(obj).strip() else THING_UNNAMED
    return format_html(str(template), object=obj, type=kind)


def _actor_text(entry: Any) -> str:
    actor = getattr(entry, "actor", None)
    if actor is not None:
        return actor.get_full_name() or actor.get_username()
    if entry.actor_name in ("", "system"):
        return _("The portal")
    return entry.actor_name


def audit_sentence(entry: Any) -> SafeString:
    """The audit entry as a sentence with links: "Anna Meier extended the test access of
    Ben Schulz until 3 Dec"."""
    model = entry.content_type.model if entry.content_type_id else ""
    url = _object_url(model, entry.object_id, entry.object_repr, entry.member_id)
    kind = str(entry.content_type.model_class()._meta.verbose_name) if model else ""
    return sentence_for(
        entry.action,
        actor=_actor_text(entry),
        obj=_link(url, entry.object_repr),
        kind=kind,
        model=model,
        changes=entry.changes,
    )


# --- version causes -------------------------------------------------------------------------

_BY = re.compile(r"^(?P<body>.*?)\s*\(by (?P<who>[^()]*)\)$")
_ITEM = re.compile(r"^(?P<action>[a-z0-9_]+\.[a-z0-9_]+) (?P<pk>\d+)$")
# Causes written as plain words by the firewall app and the workers.
_PLAIN: list[tuple[re.Pattern[str], Promise]] = [
    (re.compile(r"^push now$"), gettext_lazy("{actor} pushed the rule sets now")),
    (re.compile(r"^unpinned (?P<host>\S+)$"), gettext_lazy("{actor} unpinned {host}")),
    (
        re.compile(r"^site (?P<site>.+) settings$"),
        gettext_lazy("{actor} changed the settings of site {site}"),
    ),
    (
        re.compile(r"^firewall host (?P<host>\S+) settings$"),
        gettext_lazy("{actor} changed the settings of {host}"),
    ),
    (
        re.compile(r"^convergence \(health check\)$"),
        gettext_lazy("The health check found a host running an older version"),
    ),
    (
        re.compile(r"^pending changes \(health check\)$"),
        gettext_lazy("The health check found changes still waiting"),
    ),
    (
        re.compile(r"^reconcile \(health check\)$"),
        gettext_lazy("The health check compiled the rule sets from the database again"),
    ),
    (
        re.compile(r"^retry: host unreachable$"),
        gettext_lazy("Retried after a host was unreachable"),
    ),
    (re.compile(r"^sync$"), gettext_lazy("Scheduled synchronisation")),
]


def cause_sentences(cause: str, *, members: Mapping[int, Any] | None = None) -> list[SafeString]:
    """The sentences of one version's cause; `members` (pk -> member) names and links the
    members that `member.*` causes mention by number."""
    sentences: list[SafeString] = []
    for segment in (s.strip() for s in cause.split(";")):
        if not segment:
            continue
        match = _BY.match(segment)
        body, who = (match["body"], match["who"]) if match else (segment, "")
        actor = _("The portal") if who in ("", "system") else who
        for item in (i.strip() for i in body.split(",")):
            sentences.append(_cause_item(item, actor=actor, members=members or {}))
    return sentences


def _cause_item(item: str, *, actor: str, members: Mapping[int, Any]) -> SafeString:
    match = _ITEM.match(item)
    if match:
        action, pk = match["action"], int(match["pk"])
        member = members.get(pk) if action.startswith("member.") else None
        if member is not None:
            obj = _link(_url("members:member_detail", pk), str(member))
        else:
            obj = format_html("#{}", pk)
        prefix = action.partition(".")[0]
        return sentence_for(
            action, actor=actor, obj=obj, kind=_kind(prefix), model=prefix.replace("_", "")
        )
    for pattern, template in _PLAIN:
        plain = pattern.match(item)
        if plain:
            return format_html(str(template), actor=actor, **plain.groupdict())
    return format_html("{}", item)  # free text: already words


def _kind(prefix: str) -> str:
    """The model a cause names (`blockedport`, `port_forward`) by its name in the reader's
    language ("blocked port range"); words from the prefix when no model has that name."""
    from django.apps import apps

    wanted = prefix.replace("_", "")
    for model in apps.get_models():
        if model._meta.model_name == wanted:
            return str(model._meta.verbose_name)
    return prefix.replace("_", " ")


# --- the "Changes" column -------------------------------------------------------------------

# Recorded names that are no field of the entry's model (or read better otherwise).
FIELD_LABELS: dict[str, Promise] = {
    "detail": gettext_lazy("details"),
    "member": gettext_lazy("member"),
    "members": gettext_lazy("members told"),
    "buildings": gettext_lazy("buildings"),
    "quarantined_until": gettext_lazy("quarantined until"),
    "result": gettext_lazy("result"),
    "changed_at": gettext_lazy("changed at"),
    "delay": gettext_lazy("delay"),
    "profile": gettext_lazy("speed"),
    "room": gettext_lazy("room"),
    "version": gettext_lazy("version"),
    "pinned_version": gettext_lazy("pinned version"),
    "notice_sent_for": gettext_lazy("notice sent for the end on"),
    "locked_until": gettext_lazy("locked until"),
    "status": gettext_lazy("status"),
    "note": gettext_lazy("note"),
}


def _model_field(model: Any, name: str) -> Any:
    if model is None:
        return None
    try:
        return model._meta.get_field(name)
    except Exception:  # FieldDoesNotExist, or a reverse relation without a verbose name
        return None


def _shown(value: Any, field: Any) -> Any:
    """A recorded value as the reader reads it: a choice by its label, yes/no for booleans."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    choices = dict(getattr(field, "flatchoices", None) or ())
    if value in choices:
        return str(choices[value])
    return value


def change_rows(entry: Any) -> list[tuple[str, Any, Any]]:
    """(label, old, new) for each recorded change of `entry`, labelled with the field's name in
    the reader's language ("link rate", not `link_kbit`); a ticket update's detail as words."""
    model = entry.content_type.model_class() if entry.content_type_id else None
    rows: list[tuple[str, Any, Any]] = []
    for name, pair in (entry.changes or {}).items():
        old, new = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (None, pair)
        field = _model_field(model, name)
        if name in FIELD_LABELS:
            label = str(FIELD_LABELS[name])
        elif field is not None and hasattr(field, "verbose_name"):
            label = str(field.verbose_name)
        else:
            label = name.replace("_", " ")
        words = detail_words(entry.action) if name == "detail" else None
        if words is not None and isinstance(new, str):  # tickets' words of a ticket.update
            actor = _actor_text(entry)
            new = format_html_join(". ", "{}", ((s,) for s in words(new, actor=actor)))
        if name == "profile" or name.endswith("_profile"):
            old, new = (_shown_value(name, v) if isinstance(v, str) else v for v in (old, new))
        rows.append((label[:1].upper() + label[1:], _shown(old, field), _shown(new, field)))
    return rows
