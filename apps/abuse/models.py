"""The address-holder history: who held which address from when to when, and the lookups in it."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.abuse.choices import HolderKind, HoldingSource, HoldingState, Verdict
from apps.core.fields import InetAddressField, MacAddressField


class AddressHolding(models.Model):
    """One address held by one holder (or resting in quarantine) for a period [from, until).

    Member and device are kept as names and ids besides the foreign keys, because devices are
    deleted when they are removed and the history has to outlive them. The exclusion
    constraint `addressholding_no_overlap` is the rule itself: no two rows of one address
    overlap in time, so a lookup never finds two holders.
    """

    address = InetAddressField(_("address"))
    kind = models.CharField(_("kind"), max_length=16, choices=HolderKind.choices)
    state = models.CharField(
        _("state"), max_length=16, choices=HoldingState.choices, default=HoldingState.HELD
    )
    period = DateTimeRangeField(_("period"))
    member = models.ForeignKey(
        "members.Member",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="address_holdings",
        db_constraint=False,
    )
    member_name = models.CharField(_("member"), max_length=150, blank=True)
    device_ref = models.PositiveIntegerField(_("device id"), null=True, blank=True)
    device_name = models.CharField(_("device"), max_length=60, blank=True)
    mac = MacAddressField(_("MAC address"), null=True, blank=True)
    source = models.CharField(
        _("source"), max_length=16, choices=HoldingSource.choices, default=HoldingSource.RECORDED
    )
    cause = models.CharField(_("cause"), max_length=60, blank=True)

    class Meta:
        ordering = ["address", "period"]
        verbose_name = _("address holding")
        verbose_name_plural = _("address holdings")
        constraints = [
            # inet_ops (not btree_gist's inet class): its index also answers "addresses in
            # this /64 at time T" (<<=), which the IPv6 lookup asks.
            ExclusionConstraint(
                name="addressholding_no_overlap",
                expressions=[
                    (OpClass("address", name="inet_ops"), RangeOperators.EQUAL),
                    ("period", RangeOperators.OVERLAPS),
                ],
            ),
            models.CheckConstraint(
                condition=models.Q(state=HoldingState.HELD) | models.Q(kind=HolderKind.PUBLIC_IPV4),
                name="addressholding_quarantine_is_public",
            ),
        ]

    def __str__(self) -> str:
        holder = self.member_name or self.mac or "-"
        return f"{self.address} {self.get_state_display()} {holder} {self.period}"


class AbuseLookup(models.Model):
    """One question asked of the history: who asked, why, about what, and the verdict."""

    asked_at = models.DateTimeField(_("asked"), auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("who"),
    )
    actor_name = models.CharField(max_length=150, blank=True)
    address = InetAddressField(_("address"))
    at = models.DateTimeField(_("point in time"))
    reason = models.CharField(_("reason"), max_length=500)
    verdict = models.CharField(_("verdict"), max_length=16, choices=Verdict.choices)
    member = models.ForeignKey(
        "members.Member",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=False,
    )

    class Meta:
        ordering = ["-asked_at", "-id"]
        verbose_name = _("abuse lookup")
        verbose_name_plural = _("abuse lookups")

    def __str__(self) -> str:
        return f"{self.address} @ {self.at:%Y-%m-%d %H:%M:%S%z}"
