"""How the apps built on members take part in a membership, without members importing them.

members is the lower layer: people, buildings, rooms and memberships. network (devices,
addresses, subnets) and testaccess build on it and import it; members imports neither (an
import-linter contract in pyproject.toml keeps it so). Where a member service, page or
download needs their part, it asks every registered `MemberExtension`, in the order the apps
registered them (their AppConfig.ready(), in INSTALLED_APPS order: network, testaccess, dhcp,
tickets, abuse, notifications, traffic; the last four take part in the data download and the
erasure; dhcp and notifications add their sections to the office-hours search, the staff's
member page and the dashboard).

Calls run inside the caller's transaction, at the point where the network part ran before the
split; a refusal (a NetworkError) raised by an extension is the service's refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.db.models import QuerySet
    from django.http import HttpRequest
    from django.views import View

    from apps.members.models import Building, Member, Room

Found = list[tuple[int, str]]  # (member id, what matched), best first


class MemberExtension:
    """One app's part in memberships; every method does nothing by default."""

    def room_usable(self, *, room: Room) -> bool:
        """Whether a new member may sign up for `room` (network: its building has a subnet)."""
        return True

    def room_prefix(self, *, building: Building) -> str | None:
        """The IPv6 /64 a new room of `building` gets, or None (network: the next free one)."""
        return None

    def member_checking_in(self, *, member: Member, actor: User | None) -> None:
        """Before the status becomes active (network: refuse without a subnet, public IPv4)."""

    def member_moving(self, *, member: Member, room: Room, actor: User) -> None:
        """Before the member moves to `room` (network: refuse without a subnet, readdress)."""

    def member_ending(self, *, member: Member, actor: User) -> None:
        """Before the membership ends (network: forwards, public IPv4 and devices released)."""

    def member_changed(self, *, cause: str, actor: User | None) -> None:
        """After a write that changes what the firewalls enforce (network: its one hook)."""

    def member_search(self, *, kind: str, query: str, limit: int) -> Found:
        """Members found by what this app stores (network: MACs and addresses); `kind` is
        members.selectors.search_kind(query)."""
        return []

    def member_page_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        """This app's sections of the member page and the dashboard."""
        return {}

    def dashboard_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        """This app's part of the resident's own dashboard only (notifications: recent notices)."""
        return {}

    def staff_member_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        """This app's part of the staff's member page only (dhcp: unknown devices nearby)."""
        return {}

    def office_hours_context(
        self, *, request: HttpRequest, kind: str, query: str
    ) -> dict[str, Any]:
        """This app's part of the office-hours search (dhcp: the leases of a MAC or address);
        `kind` is members.selectors.search_kind(query)."""
        return {}

    def member_action_views(self) -> tuple[type[View], ...]:
        """Member-page actions of this app that a form may name in its `action` field."""
        return ()

    def member_data(self, *, member: Member) -> dict[str, Any]:
        """This app's part of the member's data download (JSON-ready)."""
        return {}

    def member_erase(self, *, member: Member) -> None:
        """Erase this app's personal data of a former member (apps/members/privacy.py)."""

    def members_kept(self) -> QuerySet[Any] | None:
        """Ids (a `values("member_id")` query) of erased members whose room stays this app still
        needs (abuse: its address history answers "who lived there"), or None."""
        return None


_extensions: list[MemberExtension] = []


def member_extension_register(extension: MemberExtension) -> None:
    """Add an app's part (from its AppConfig.ready(); once per class)."""
    if not any(type(known) is type(extension) for known in _extensions):
        _extensions.append(extension)


def member_extensions() -> tuple[MemberExtension, ...]:
    """The registered parts, in registration order."""
    return tuple(_extensions)
