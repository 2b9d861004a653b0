"""A member's personal data: the copy they can download, and its erasure after they left.

What is erased, and what stays (docs/retention.md, "Personal data"):
- `PORTAL_RETAIN_FORMER_MEMBERS_DAYS` after a membership ended, the login is anonymised (name,
  e-mail and password gone, username `former-<id>`, deactivated, API token deleted; a login that
  also holds a staff role stays, with its name: it is a volunteer's account now), the phone
  number cleared, notices and notice preferences deleted, the member's tickets deleted with
  their messages and attachments (a ticket body is what the member wrote: personal data, and
  after the retention period no longer needed to support them), their detached port forwards
  deleted, and in the audit entries about them the personal values (names, e-mail, phone,
  device names, descriptions, notes) replaced by "erased". The member row stays, anonymised, so
  the statistics, the audit trail and the abuse history keep pointing at one id.
- The address-holder history (apps/abuse) keeps the member's name, devices and MACs in its rows,
  and the member's room stays, for as long as its own retention (`PORTAL_ABUSE_HISTORY_DAYS`
  after a holding ended) says: an abuse complaint about an address must still be answerable.
  The retention task prunes those holdings, and the erased member's room stays then follow.
Both the export and the erasure write an audit entry (without personal values).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.audit.models import AuditEntry
from apps.audit.services import audit_record
from apps.members.choices import MemberStatus
from apps.members.extensions import member_extensions
from apps.members.models import Member, RoomStay

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = structlog.get_logger(__name__)

FORMAT = "portal-member-data/1"
ERASED = "erased"
# Keys of audit `changes` whose values are personal (apps/*/services.py write these).
PERSONAL_KEYS = frozenset(
    {"name", "first_name", "last_name", "email", "phone", "member", "device", "description",
     "note", "username", "reason"}
)  # fmt: skip


# --- the download ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON value: datetimes as ISO 8601, addresses and ranges as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "lower") and hasattr(value, "upper"):  # a range
        return {"from": _plain(value.lower), "until": _plain(value.upper)}
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return str(value)


def plain(value: Any) -> Any:
    """`value` as JSON-ready data (dates as ISO text, ranges as from/until, addresses as text)."""
    return _plain(value)


def data_rows(qs: models.QuerySet, *fields: str) -> list[dict[str, Any]]:
    """The rows' `fields` as JSON-ready dicts."""
    return [{k: _plain(v) for k, v in row.items()} for row in qs.values(*fields)]


def _audit(member: Member) -> list[dict[str, Any]]:
    # What was done to the member's data and when; who did it (a volunteer's name) is the
    # volunteer's personal data and is left out.
    entries = AuditEntry.objects.filter(member=member).order_by("at", "id")
    return data_rows(entries, "at", "action", "object_repr", "changes")


def member_data(*, member: Member) -> dict[str, Any]:
    """Everything the portal stores about `member`, as one JSON-ready dict."""
    user = member.user
    # network: public IPv4, devices, forwards, openings; tickets; abuse: the address history;
    # notifications: notices and preferences; traffic: the buckets kept.
    extended: dict[str, Any] = {}
    for extension in member_extensions():
        extended.update(extension.member_data(member=member))
    return {
        "format": FORMAT,
        "exported_at": _plain(timezone.now()),
        "account": {
            "username": user.get_username(),
            "first_name": user.first_name,
            "last_name": user.last_name,
            "email": user.email,
            "date_joined": _plain(user.date_joined),
            "last_login": _plain(user.last_login),
        },
        "membership": {
            "id": member.pk,
            "status": member.status,
            "status_since": _plain(member.status_since),
            "room": member.room.label if member.room_id else None,
            "phone": member.phone,
            "registered_at": _plain(member.registered_at),
            "checked_in_at": _plain(member.checked_in_at),
            "test_access_until": _plain(member.test_access_until),
            "ended_at": _plain(member.ended_at),
        },
        "room_stays": data_rows(member.room_stays.order_by("period"), "room__label", "period"),
        "status_changes": data_rows(
            member.status_changes.order_by("at", "id"), "old_status", "new_status", "at", "note"
        ),
        **extended,
        "changes": _audit(member),
    }


def member_data_export(*, member: Member, actor: User) -> dict[str, Any]:
    """The member's data for a download; audited (who downloaded whose data, when): one row
    per actor, member and day, so a script fetching it every minute does not fill the trail."""
    data = member_data(member=member)
    day_start = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    recorded = AuditEntry.objects.filter(
        action="member.data_export",
        member=member,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        at__gte=day_start,
    )
    if not recorded.exists():
        audit_record(actor=actor, action="member.data_export", obj=member, member=member)
    return data


# --- the erasure ----------------------------------------------------------------------------------


def former_members_due(*, now: dt.datetime | None = None) -> models.QuerySet[Member]:
    """Former members whose personal data is past its retention and not yet erased."""
    now = now or timezone.now()
    cutoff = now - dt.timedelta(days=settings.PORTAL_RETAIN_FORMER_MEMBERS_DAYS)
    return Member.objects.filter(
        status=MemberStatus.ENDED, ended_at__lt=cutoff, erased_at__isnull=True
    ).order_by("id")


def _audit_scrub(member: Member) -> None:
    """Personal values out of the audit entries about the member; the what and when stay."""
    for entry in AuditEntry.objects.filter(member=member).only("changes", "object_repr"):
        changes = {
            key: [None if v is None else ERASED for v in values] if key in PERSONAL_KEYS else values
            for key, values in (entry.changes or {}).items()
        }
        entry.changes = changes
        entry.object_repr = f"{entry.content_type.model} #{entry.object_id}"
        entry.save(update_fields=["changes", "object_repr"])


@transaction.atomic
def member_personal_data_erase(*, member: Member, now: dt.datetime | None = None) -> Member:
    """Erase or anonymise one former member's personal data (what stays: the module docstring)."""
    member = Member.objects.select_for_update().select_related("user").get(pk=member.pk)
    if member.erased_at is not None or member.status != MemberStatus.ENDED:
        return member  # erased already, or came back: nothing to do
    user = member.user
    for extension in member_extensions():
        # network: detached port forwards; tickets: the member's tickets; notifications:
        # notices and preferences
        extension.member_erase(member=member)
    Token.objects.filter(user=user).delete()
    member.status_changes.exclude(note="").update(note="")
    _audit_scrub(member)

    if not (user.is_staff or has_role(user, *STAFF_ROLES)):
        # A volunteer who lived here keeps their login: it is their staff account now.
        user.username = f"former-{member.pk}"
        user.first_name = user.last_name = user.email = ""
        user.is_active = False
        user.set_unusable_password()
        user.save(
            update_fields=["username", "first_name", "last_name", "email", "is_active", "password"]
        )
    member.phone = ""
    member.erased_at = now or timezone.now()
    member.save(update_fields=["phone", "erased_at"])
    audit_record(actor=None, action="member.erase", obj=member, member=member)
    return member


def erased_room_stays_prune() -> int:
    """Room stays of erased members once the abuse history holds nothing of theirs any more
    (its retention pruned their last holding): until then a lookup may ask for their room."""
    stays = RoomStay.objects.filter(member__erased_at__isnull=False)
    for extension in member_extensions():
        kept = extension.members_kept()  # abuse: the members its history still holds
        if kept is not None:
            stays = stays.exclude(member_id__in=kept)
    deleted, _ = stays.delete()
    return deleted


def former_members_erase(*, now: dt.datetime | None = None) -> list[int]:
    """Erase every former member that is due (one transaction each); their ids."""
    erased = list(former_members_due(now=now).values_list("pk", flat=True))
    for pk in erased:
        member_personal_data_erase(member=Member(pk=pk), now=now)
    erased_room_stays_prune()
    if erased:
        log.info("members.erased", count=len(erased))
    return erased
