"""Reads for the notifications app: a member's own notices and preferences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from django.http import Http404

from apps.notifications.models import Notice, Preference

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def notice_list(*, actor: User) -> QuerySet[Notice]:
    """The actor's own notices, newest first (staff see only their own as well)."""
    return Notice.objects.visible_to(actor).order_by("-created_at", "-id")


def notice_get(*, actor: User, pk: int) -> Notice:
    """One of the actor's own notices; anyone else's is 404, as if it did not exist."""
    notice = notice_list(actor=actor).filter(pk=pk).first()
    if notice is None:
        raise Http404
    return notice


def preference_of(*, member: Any) -> Preference:
    """The member's preferences; an unsaved row with the defaults when they never chose."""
    found = Preference.objects.filter(member=member).first()
    return found or Preference(member=member)
