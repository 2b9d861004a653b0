"""Notices to members (shown on their page, mailed in batches) and what they chose to get."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.notifications.choices import LiveOutcome, LiveWhat, MailStatus, NoticeKind
from apps.notifications.texts import notice_text

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class NoticeQuerySet(models.QuerySet["Notice"]):
    def visible_to(self, actor: User) -> NoticeQuerySet:
        """A notice is personal: everyone, staff included, sees only their own."""
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(member__user=actor)


class Notice(models.Model):
    """One thing a member was told about; its text is rendered from `params` in the reader's
    language, so the page and the mail never store a translation."""

    member = models.ForeignKey(
        "members.Member", on_delete=models.CASCADE, related_name="notices", verbose_name=_("member")
    )
    kind = models.CharField(_("kind"), max_length=16, choices=NoticeKind.choices)
    params = models.JSONField(default=dict, blank=True)
    # What the notice is about ("incident:12"): at most one notice per member, kind and source,
    # so a task that runs twice never tells anyone twice. Empty: no such guard.
    source = models.CharField(max_length=80, blank=True)
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    mail_status = models.CharField(
        _("mail"), max_length=16, choices=MailStatus.choices, default=MailStatus.PENDING
    )
    mailed_at = models.DateTimeField(_("mailed"), null=True, blank=True)

    objects = NoticeQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("notice")
        verbose_name_plural = _("notices")
        indexes = [
            models.Index(fields=["member", "-created_at"], name="notice_member_created"),
            models.Index(fields=["member", "kind", "mailed_at"], name="notice_member_kind_mailed"),
            models.Index(
                fields=["member", "kind"],
                condition=Q(mail_status=MailStatus.PENDING),
                name="notice_mail_pending",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=NoticeKind.values), name="notice_kind_valid"
            ),
            models.UniqueConstraint(
                fields=["member", "kind", "source"],
                condition=~Q(source=""),
                name="notice_once_per_source",
            ),
            models.CheckConstraint(
                condition=~Q(mail_status=MailStatus.SENT) | Q(mailed_at__isnull=False),
                name="notice_sent_has_time",
            ),
        ]

    def __str__(self) -> str:
        return str(self.title)

    @property
    def title(self) -> str:
        return notice_text(self)[0]

    @property
    def body(self) -> str:
        return notice_text(self)[1]


class Preference(models.Model):
    """A member's choices: the language of their notices and, per kind, mail on or off (a
    notice on their page is always made). No row means the defaults."""

    member = models.OneToOneField(
        "members.Member", on_delete=models.CASCADE, related_name="notice_preference"
    )
    # Empty: not chosen, so mails are written in every language of the portal (as the
    # test-access mail always was).
    language = models.CharField(
        _("language of notices"), max_length=8, choices=settings.LANGUAGES, blank=True
    )
    mail = models.JSONField(_("mail per kind"), default=dict, blank=True)
    updated_at = models.DateTimeField(_("changed"), auto_now=True)

    class Meta:
        verbose_name = _("notice preference")
        verbose_name_plural = _("notice preferences")

    def __str__(self) -> str:
        return f"{self.member}"

    def wants_mail(self, kind: str) -> bool:
        """Whether the member wants mail for `kind` (the kind's default when never chosen)."""
        return bool(self.mail.get(kind, NoticeKind.mail_default(kind)))

    def languages(self) -> list[str]:
        """The languages a mail to this member is written in."""
        return [self.language] if self.language else [code for code, _name in settings.LANGUAGES]


class LiveCheck(models.Model):
    """How one change of a device, forward or opening ended on the firewalls: decided once per
    change (row and `changed_at`), so a notice is never made twice for it."""

    what = models.CharField(max_length=8, choices=LiveWhat.choices)
    object_id = models.PositiveBigIntegerField()
    changed_at = models.DateTimeField()
    outcome = models.CharField(max_length=8, choices=LiveOutcome.choices)
    member = models.ForeignKey("members.Member", on_delete=models.CASCADE, related_name="+")
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("live check")
        verbose_name_plural = _("live checks")
        constraints = [
            models.UniqueConstraint(
                fields=["what", "object_id", "changed_at"], name="livecheck_once_per_change"
            ),
        ]
        indexes = [models.Index(fields=["decided_at"], name="livecheck_decided")]

    def __str__(self) -> str:
        return f"{self.what} {self.object_id} @ {self.changed_at:%Y-%m-%d %H:%M:%S}: {self.outcome}"
