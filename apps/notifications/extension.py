"""Notifications' part in a membership (apps/members/extensions.py): notices and the notice
preferences in the member's data download, deleted at the erasure; the newest notices on the
dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.members.extensions import MemberExtension
from apps.members.models import Member
from apps.members.privacy import plain
from apps.notifications.models import Notice, Preference
from apps.notifications.selectors import notice_list

if TYPE_CHECKING:
    from django.http import HttpRequest


class NotificationsMemberExtension(MemberExtension):
    """The member's notices and how they want to be told."""

    def member_data(self, *, member: Member) -> dict[str, Any]:
        notices = Notice.objects.filter(member=member).order_by("created_at", "id")
        preference = Preference.objects.filter(member=member).first()
        return {
            "notices": [
                {
                    "kind": n.kind,
                    "title": str(n.title),
                    "text": str(n.body),
                    "at": plain(n.created_at),
                }
                for n in notices
            ],
            "notice_preferences": (
                {"language": preference.language, "mail": preference.mail} if preference else None
            ),
        }

    def dashboard_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        """The three newest notices on the resident's dashboard."""
        return {"recent_notices": list(notice_list(actor=request.user)[:3])}

    def member_erase(self, *, member: Member) -> None:
        Notice.objects.filter(member=member).delete()
        Preference.objects.filter(member=member).delete()
