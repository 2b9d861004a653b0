"""Subnets, public pools and addresses, devices, and the admin settings for them."""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.indexes import OpClass
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.network.fields import CidrField, InetAddressField, MacAddressField


class Family(models.IntegerChoices):
    IPV4 = 4, "IPv4"
    IPV6 = 6, "IPv6"


class Subnet(models.Model):
    """A building's private IPv4 subnet or its IPv6 prefix (rooms take /64s from it)."""

    building = models.ForeignKey(
        "members.Building", on_delete=models.PROTECT, related_name="subnets"
    )
    family = models.PositiveSmallIntegerField(_("family"), choices=Family.choices)
    network = CidrField(_("network"), unique=True)

    class Meta:
        ordering = ["building__code", "family"]
        verbose_name = _("subnet")
        verbose_name_plural = _("subnets")
        constraints = [
            models.UniqueConstraint(fields=["building", "family"], name="subnet_one_per_family"),
            ExclusionConstraint(
                name="subnet_no_overlap",
                expressions=[(OpClass("network", name="inet_ops"), "&&")],
            ),
            models.CheckConstraint(
                condition=Q(family=4, network__regex=r"^[0-9.]+/")
                | Q(family=6, network__contains=":"),
                name="subnet_family_matches",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.network} ({self.building.code})"


class PublicPool(models.Model):
    """A range of public IPv4 addresses handed to members (one each)."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    network = CidrField(_("network"), unique=True)
    active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["id"]
        verbose_name = _("public IPv4 pool")
        verbose_name_plural = _("public IPv4 pools")
        constraints = [
            ExclusionConstraint(
                name="publicpool_no_overlap",
                expressions=[(OpClass("network", name="inet_ops"), "&&")],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.network})"


class PublicAddress(models.Model):
    """A public IPv4 that is or was in use: held by one member, or in quarantine until a date."""

    pool = models.ForeignKey(PublicPool, on_delete=models.PROTECT, related_name="addresses")
    address = InetAddressField(_("address"), protocol="IPv4", unique=True)
    member = models.OneToOneField(
        "members.Member",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="public_ipv4",
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    quarantined_until = models.DateTimeField(_("quarantined until"), null=True, blank=True)

    class Meta:
        ordering = ["address"]
        verbose_name = _("public IPv4 address")
        verbose_name_plural = _("public IPv4 addresses")
        constraints = [
            models.CheckConstraint(
                condition=Q(member__isnull=True) | Q(quarantined_until__isnull=True),
                name="publicaddress_held_or_quarantined",
            ),
        ]

    def __str__(self) -> str:
        return self.address


class DeviceQuerySet(models.QuerySet["Device"]):
    def visible_to(self, actor: Any) -> DeviceQuerySet:
        """Staff see every device; a member sees only their own."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(member__user=actor)


class Device(models.Model):
    """A member's device: its MAC, private IPv4 from the building, IPv6 from the room's /64."""

    member = models.ForeignKey("members.Member", on_delete=models.PROTECT, related_name="devices")
    name = models.CharField(_("name"), max_length=60)
    mac = MacAddressField(_("MAC address"), unique=True)
    ipv4 = InetAddressField(_("IPv4 address"), protocol="IPv4", unique=True)
    ipv6 = InetAddressField(_("IPv6 address"), protocol="IPv6", unique=True, null=True, blank=True)
    created_at = models.DateTimeField(_("added"), auto_now_add=True)
    updated_at = models.DateTimeField(_("changed"), auto_now=True)

    objects = DeviceQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        verbose_name = _("device")
        verbose_name_plural = _("devices")
        constraints = [
            models.UniqueConstraint(fields=["member", "name"], name="device_name_per_member"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.mac})"


class NetworkSettings(models.Model):
    """Admin settings for the network rules (one row)."""

    device_limit = models.PositiveSmallIntegerField(
        _("devices per member"),
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
    )
    quarantine_days = models.PositiveSmallIntegerField(
        _("quarantine of freed public addresses (days)"),
        default=30,
        validators=[MaxValueValidator(3650)],
    )

    class Meta:
        verbose_name = _("network settings")
        verbose_name_plural = _("network settings")
        constraints = [models.CheckConstraint(condition=Q(id=1), name="networksettings_singleton")]

    def __str__(self) -> str:
        return str(_("Network settings"))

    @classmethod
    def load(cls) -> NetworkSettings:
        """The settings row, created with the defaults on first use."""
        obj, _created = cls.objects.get_or_create(id=1)
        return obj
