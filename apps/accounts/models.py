"""Sign-in state the portal keeps beside django-otp's devices."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class SecondFactorAttempts(models.Model):
    """Wrong second-factor codes of one user in a row, and the lock they led to."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="second_factor_attempts",
        verbose_name=_("user"),
    )
    failures = models.PositiveIntegerField(_("wrong codes in a row"), default=0)
    locked_until = models.DateTimeField(_("locked until"), null=True, blank=True)

    class Meta:
        verbose_name = _("second-factor attempts")
        verbose_name_plural = _("second-factor attempts")

    def __str__(self) -> str:
        return f"{self.user} ({self.failures})"
