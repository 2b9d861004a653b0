"""The second sign-in step: a TOTP authenticator with recovery codes (django-otp).

After the password a user who needs the second step is logged in but not *verified*
(`request.user.is_verified()`, set by django-otp's middleware); SecondFactorMiddleware lets such
a session reach only the code page, the enrolment pages, logout and the language switch. Staff
(volunteer, support, admin and Django staff) need it when PORTAL_REQUIRE_STAFF_2FA is on;
everyone who set it up needs it. Wrong codes are counted per user (SecondFactorAttempts): after
PORTAL_2FA_FAILURE_LIMIT in a row the second step is locked for PORTAL_2FA_LOCKOUT_MINUTES, also
for the right code, and the lock is audited. API tokens do not pass through here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import segno
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django_otp import devices_for_user
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.models import SecondFactorAttempts
from apps.accounts.roles import STAFF_ROLES, has_role
from apps.audit.services import audit_record

__all__ = [
    "CodeCheck",
    "recovery_codes_left",
    "recovery_codes_regenerate",
    "second_factor_check",
    "second_factor_disable",
    "second_factor_enabled",
    "second_factor_locked_until",
    "second_factor_required",
    "second_factor_satisfied",
    "session_enrolled",
    "totp_enrol_confirm",
    "totp_enrol_start",
    "totp_qr_svg",
    "totp_secret_text",
]

ENROLLED_KEY = "second_factor_enrolled"
TOTP_NAME = "authenticator"
RECOVERY_NAME = "recovery codes"


# --- Selectors --------------------------------------------------------------------------------
def staff_must_use(user: Any) -> bool:
    """True when the setting makes the second step compulsory for `user` (a staff account)."""
    return settings.PORTAL_REQUIRE_STAFF_2FA and (
        has_role(user, *STAFF_ROLES) or bool(getattr(user, "is_staff", False))
    )


def second_factor_enabled(user: Any) -> bool:
    """True when `user` has a confirmed authenticator."""
    return TOTPDevice.objects.filter(user_id=user.pk, confirmed=True).exists()


def second_factor_required(user: Any) -> bool:
    """True when `user` must give a code after the password: staff under the setting, or anyone
    who set up an authenticator."""
    if not getattr(user, "is_authenticated", False):
        return False
    return staff_must_use(user) or second_factor_enabled(user)


def session_enrolled(request: HttpRequest) -> bool:
    """Whether the session's user has an authenticator, as recorded at sign-in (and on enrolment
    or removal in this session), so that pages do not ask the database on every request."""
    enrolled = request.session.get(ENROLLED_KEY)
    if enrolled is None:  # a session from before this was recorded
        enrolled = second_factor_enabled(request.user)
        request.session[ENROLLED_KEY] = enrolled
    return bool(enrolled)


def second_factor_satisfied(request: HttpRequest) -> bool:
    """True unless the session's user still owes the second step."""
    user = request.user
    if not user.is_authenticated:
        return True
    if getattr(user, "is_verified", lambda: False)():
        return True
    return not (staff_must_use(user) or session_enrolled(request))


@receiver(user_logged_in)
def _record_enrolment(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[ENROLLED_KEY] = second_factor_enabled(user)


def second_factor_locked_until(user: Any) -> datetime | None:
    """Until when wrong codes have locked the second step of `user` (None: not locked)."""
    return (
        SecondFactorAttempts.objects.filter(user_id=user.pk, locked_until__gt=timezone.now())
        .values_list("locked_until", flat=True)
        .first()
    )


def recovery_codes_left(user: Any) -> int:
    """How many unused recovery codes `user` has."""
    return StaticToken.objects.filter(
        device__user_id=user.pk, device__name=RECOVERY_NAME, device__confirmed=True
    ).count()


def totp_secret_text(device: TOTPDevice) -> str:
    """The secret as authenticator apps take it when typed: base32 in groups of four."""
    from base64 import b32encode

    secret = b32encode(device.bin_key).decode("ascii").rstrip("=")
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


def totp_qr_svg(device: TOTPDevice) -> SafeString:
    """The otpauth:// URL of `device` as an inline SVG QR code (no script, no style attributes)."""
    qr = segno.make(device.config_url, error="m")
    svg = qr.svg_inline(scale=4, light="#fff", title=_("QR code for your authenticator app"))
    return mark_safe(svg)  # noqa: S308 - segno's own markup; the title is escaped by segno


# --- Services ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CodeCheck:
    """What a code was: the device it matched, or why not (locked, or wrong with tries left)."""

    device: Device | None
    locked_until: datetime | None = None
    tries_left: int = 0

    @property
    def ok(self) -> bool:
        return self.device is not None


def _normalise(code: str) -> str:
    """Codes as people type them: spaces and dashes dropped, recovery codes in lower case."""
    return "".join(code.split()).replace("-", "").lower()


def _match(user: Any, code: str) -> Device | None:
    """The confirmed device (authenticator or recovery codes) that accepts `code`, used up."""
    code = _normalise(code)
    if not code or len(code) > 16:
        return None
    for device in devices_for_user(user, for_verify=True):
        if device.verify_token(code):  # TOTP refuses a replayed step; a recovery code is deleted
            return device
    return None


def second_factor_check(*, user: Any, code: str) -> CodeCheck:
    """Check `code` (authenticator or recovery code) for `user`; count a wrong one, lock after
    PORTAL_2FA_FAILURE_LIMIT in a row (audited); a locked user is refused even the right code."""
    SecondFactorAttempts.objects.get_or_create(user=user)
    with transaction.atomic():
        attempts = SecondFactorAttempts.objects.select_for_update().get(user=user)
        now = timezone.now()
        if attempts.locked_until is not None and attempts.locked_until > now:
            return CodeCheck(None, locked_until=attempts.locked_until)
        device = _match(user, code)
        if device is not None:
            if attempts.failures or attempts.locked_until:
                attempts.failures, attempts.locked_until = 0, None
                attempts.save(update_fields=["failures", "locked_until"])
            return CodeCheck(device)
        attempts.failures += 1
        limit = settings.PORTAL_2FA_FAILURE_LIMIT
        if attempts.failures < limit:
            attempts.save(update_fields=["failures"])
            audit_record(actor=user, action="account.second_factor_failed", obj=user)
            return CodeCheck(None, tries_left=limit - attempts.failures)
        attempts.locked_until = now + timedelta(minutes=settings.PORTAL_2FA_LOCKOUT_MINUTES)
        attempts.failures = 0
        attempts.save(update_fields=["failures", "locked_until"])
        audit_record(
            actor=user,
            action="account.second_factor_locked",
            obj=user,
            changes={"locked_until": [None, attempts.locked_until.isoformat()]},
        )
        return CodeCheck(None, locked_until=attempts.locked_until)


def totp_enrol_start(*, user: Any) -> TOTPDevice:
    """The user's authenticator being set up: the secret shown before, or a new one."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).order_by("pk").first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=False)
    return device


@transaction.atomic
def totp_enrol_confirm(*, user: Any, device: TOTPDevice, code: str) -> list[str] | None:
    """Confirm `device` with its first code: it replaces any earlier authenticator, and a fresh
    set of recovery codes is made (returned, to be shown once). None when the code is wrong."""
    device = TOTPDevice.objects.select_for_update().get(pk=device.pk, user=user, confirmed=False)
    if not device.verify_token(_normalise(code)):
        return None
    TOTPDevice.objects.filter(user=user).exclude(pk=device.pk).delete()
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    codes = _recovery_codes_make(user=user)
    audit_record(actor=user, action="account.second_factor_enable", obj=user)
    return codes


def _recovery_codes_make(*, user: Any) -> list[str]:
    static, _created = StaticDevice.objects.get_or_create(
        user=user, name=RECOVERY_NAME, defaults={"confirmed": True}
    )
    static.token_set.all().delete()
    codes: set[str] = set()
    while len(codes) < settings.PORTAL_2FA_RECOVERY_CODES:
        codes.add(StaticToken.random_token())
    StaticToken.objects.bulk_create(StaticToken(device=static, token=c) for c in sorted(codes))
    return sorted(codes)


@transaction.atomic
def recovery_codes_regenerate(*, user: Any) -> list[str]:
    """New recovery codes for `user`; the old ones stop working (audited)."""
    codes = _recovery_codes_make(user=user)
    audit_record(actor=user, action="account.recovery_codes_regenerate", obj=user)
    return codes


@transaction.atomic
def second_factor_disable(*, user: Any) -> None:
    """Remove the authenticator and the recovery codes of `user` (audited)."""
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    audit_record(actor=user, action="account.second_factor_disable", obj=user)
