"""Mails to members in their language: the test-access mail's builder, generalised.

A member who never chose a language gets every language of the portal in one mail (subjects
joined with " / ", bodies separated by a signature line), as the test-access mail always did;
one who chose gets only theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

__all__ = ["member_mail", "notices_mail"]


def member_mail(
    *,
    member: Any,
    languages: Sequence[str],
    subject: Callable[[], str],
    paragraphs: Callable[[], list[str]],
    connection: Any = None,
) -> EmailMessage:
    """A mail to `member` written once per language: `subject()` and `paragraphs()` are called
    with each language active; a greeting and a footer (where to change the preferences) are
    added around the paragraphs."""
    subjects, texts = [], []
    where = settings.PORTAL_URL.rstrip("/") + reverse("notifications:preferences")
    for language in languages:
        with translation.override(language):
            subjects.append(subject())
            greeting = _("Hello %(name)s,") % {"name": member}
            footer = _("Which notices you get by mail, and in which language: %(url)s") % {
                "url": where
            }
            texts.append("\n\n".join([greeting, *paragraphs(), footer]))
    return EmailMessage(
        subject=" / ".join(dict.fromkeys(subjects)),
        body="\n\n-- \n\n".join(texts),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[member.user.email],
        headers={"Auto-Submitted": "auto-generated"},
        connection=connection,
    )


def notices_mail(
    *, member: Any, languages: Sequence[str], notices: Sequence[Any], connection: Any = None
) -> EmailMessage:
    """One mail with every notice of one kind that waited for it (oldest first)."""

    def subject() -> str:
        if len(notices) == 1:
            return notices[0].title
        kind = notices[0].get_kind_display()
        return ngettext(
            "%(count)d notice: %(kind)s", "%(count)d notices: %(kind)s", len(notices)
        ) % {
            "count": len(notices),
            "kind": kind,
        }

    def paragraphs() -> list[str]:
        return [f"{notice.title}\n\n{notice.body}" for notice in notices]

    return member_mail(
        member=member,
        languages=languages,
        subject=subject,
        paragraphs=paragraphs,
        connection=connection,
    )
