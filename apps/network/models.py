"""Subnets, public pools and addresses, devices, and the admin settings for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import IntegerRangeField, RangeOperators
from django.contrib.postgres.indexes import OpClass
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Case, F, Func, Q, Value, When
from django.utils.translation import gettext_lazy as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.fields import CidrField, InetAddressField, MacAddressField
from apps.network.choices import Direction, Protocol
from apps.network.ports import port_text

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Family(models.IntegerChoices):
    IPV4 = 4, "IPv4"
    IPV6 = 6, "IPv6"


class Subnet(models.Model):
    """A building's private IPv4 subnet or its IPv6 prefix (rooms take /64s from it)."""

    building = models.ForeignKey(
        "members.Building",
        on_delete=models.PROTECT,
        related_name="subnets",
        verbose_name=_("building"),
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
    def visible_to(self, actor: User) -> DeviceQuerySet:
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
    port_forward_limit = models.PositiveSmallIntegerField(
        _("port forwards per member"),
        default=20,
        validators=[MaxValueValidator(1000)],
        help_text=_("Disabled forwards count too. 0 turns port forwarding off for new forwards."),
    )
    ipv6_opening_limit = models.PositiveSmallIntegerField(
        _("IPv6 openings per member"), default=20, validators=[MaxValueValidator(1000)]
    )
    test_access_max_days = models.PositiveSmallIntegerField(
        _("longest test access (days)"),
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(366)],
        help_text=_("Grants and extensions may not end later than this many days from today."),
    )
    test_access_notice_days = models.PositiveSmallIntegerField(
        _("mail test-access members this many days before the end"),
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(60)],
    )
    conntrack_quota_devices = models.PositiveIntegerField(
        _("connections a member's devices may hold"),
        default=10000,
        db_default=10000,
        validators=[MaxValueValidator(1_000_000)],
        help_text=_(
            "Per member, in the firewalls' connection table; new ones beyond it are dropped and "
            "counted (staff see who on the firewall page). 0: no limit."
        ),
    )
    probe_address = models.GenericIPAddressField(
        _("probe host (management address)"),
        null=True,
        blank=True,
        help_text=_(
            "A host outside the network that tests members' forwards (deploy/probe/portal-probe "
            'as the forced command of the portal\'s key). Empty: no "Test" buttons.'
        ),
    )
    probe_port = models.PositiveIntegerField(_("probe host SSH port"), default=22, db_default=22)
    probe_user = models.CharField(
        _("probe host SSH user"), max_length=32, default="root", db_default="root"
    )
    forward_tests_per_hour = models.PositiveSmallIntegerField(
        _("forward tests per member and hour"),
        default=10,
        db_default=10,
        validators=[MaxValueValidator(1000)],
    )
    conntrack_quota_forwards = models.PositiveIntegerField(
        _("connections a member's forwards may receive"),
        default=4000,
        db_default=4000,
        validators=[MaxValueValidator(1_000_000)],
        help_text=_(
            "Per member, through port forwards and IPv6 openings: a flood aimed at one member "
            "cannot fill the table. 0: no limit."
        ),
    )

    syn_proxy = models.BooleanField(
        _("SYN proxy for port forwards"),
        default=False,
        db_default=False,
        help_text=_(
            "The firewall answers a TCP connection to a port forward itself and connects to "
            "the device only once the client completed the handshake: a flood of spoofed "
            "connection attempts never reaches the device and fills no table. Costs: where the "
            "device speaks first (SSH, SMTP, FTP), its first data arrives about a second late."
        ),
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


# --- port forwards, IPv6 openings, shaping, policy ---------------------------------------------


class Int4Range(Func):
    """int4range(first, last, '[]') in SQL: an inclusive integer range for GiST constraints."""

    function = "int4range"
    output_field = IntegerRangeField()


def _protocol_span(field: str = "protocol") -> Int4Range:
    """tcp -> [0,1), udp -> [1,2), both -> [0,2): `&&` makes both overlap tcp and udp."""
    return Int4Range(
        Case(When(**{field: Protocol.UDP}, then=Value(1)), default=Value(0)),
        Case(When(**{field: Protocol.TCP}, then=Value(1)), default=Value(2)),
    )


def _port_checks(prefix: str, first: str, last: str, *, nullable: bool = False) -> list[Any]:
    condition = Q(**{f"{first}__gte": 1}) & Q(**{f"{last}__lte": 65535})
    condition &= Q(**{f"{first}__lte": F(last)})
    if nullable:
        condition |= Q(**{f"{first}__isnull": True, f"{last}__isnull": True})
    return [models.CheckConstraint(condition=condition, name=f"{prefix}_ports_valid")]


class PortForwardQuerySet(models.QuerySet["PortForward"]):
    def visible_to(self, actor: User) -> PortForwardQuerySet:
        """Staff see every forward; a member sees only their own."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(member__user=actor)


class PortForward(models.Model):
    """Destination NAT of ports of the member's public IPv4 to ports of one of their devices.

    `public_address` is the member's public IPv4 while the membership holds it; it is cleared
    (and the forward disabled) when the address goes back to the pool, so an old forward never
    reserves ports of the next holder. No two forwards of one address overlap on a protocol
    (`both` overlaps tcp and udp): the exclusion constraint `portforward_no_overlap` decides.
    """

    member = models.ForeignKey(
        "members.Member", on_delete=models.CASCADE, related_name="port_forwards"
    )
    public_address = models.ForeignKey(
        PublicAddress,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="port_forwards",
        verbose_name=_("public IPv4"),
    )
    device = models.ForeignKey(
        Device,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="port_forwards",
        verbose_name=_("device"),
    )
    protocol = models.CharField(_("protocol"), max_length=4, choices=Protocol.choices)
    public_first = models.PositiveIntegerField(_("first public port"))
    public_last = models.PositiveIntegerField(_("last public port"))
    target_first = models.PositiveIntegerField(_("first port on the device"))
    target_last = models.PositiveIntegerField(_("last port on the device"))
    enabled = models.BooleanField(_("enabled"), default=True)
    description = models.CharField(_("description"), max_length=100, blank=True)
    created_at = models.DateTimeField(_("added"), auto_now_add=True)
    updated_at = models.DateTimeField(_("changed"), auto_now=True)

    objects = PortForwardQuerySet.as_manager()
    # The live state on the firewalls ({"state": "pending"|"live"|"failed", "hosts", "since",
    # "reason"}); filled per row by the firewall app's selectors, None means pending.
    live: Any = None

    class Meta:
        ordering = ["public_first", "protocol", "id"]
        verbose_name = _("port forward")
        verbose_name_plural = _("port forwards")
        indexes = [models.Index(fields=["member", "public_first"], name="portforward_member")]
        constraints = [
            *_port_checks("portforward_public", "public_first", "public_last"),
            *_port_checks("portforward_target", "target_first", "target_last"),
            models.CheckConstraint(
                condition=Q(public_last=F("public_first") + F("target_last") - F("target_first")),
                name="portforward_equal_lengths",
            ),
            models.CheckConstraint(
                condition=Q(enabled=False) | Q(device__isnull=False, public_address__isnull=False),
                name="portforward_enabled_is_complete",
            ),
            models.CheckConstraint(
                condition=Q(protocol__in=Protocol.values), name="portforward_protocol_valid"
            ),
            ExclusionConstraint(
                name="portforward_no_overlap",
                expressions=[
                    ("public_address", RangeOperators.EQUAL),
                    (
                        Int4Range("public_first", "public_last", Value("[]")),
                        RangeOperators.OVERLAPS,
                    ),
                    (_protocol_span(), RangeOperators.OVERLAPS),
                ],
                condition=Q(public_address__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_protocol_display()} {self.public_ports} -> {self.target_ports}"

    @property
    def public_ports(self) -> str:
        return port_text(self.public_first, self.public_last)

    @property
    def target_ports(self) -> str:
        return port_text(self.target_first, self.target_last)


class Ipv6OpeningQuerySet(models.QuerySet["Ipv6Opening"]):
    def visible_to(self, actor: User) -> Ipv6OpeningQuerySet:
        """Staff see every opening; a member sees only those of their own devices."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(device__member__user=actor)


class Ipv6Opening(models.Model):
    """Inbound IPv6 to one device: a protocol and port range, or all ports (no ports, both).

    Openings of one device do not overlap (`ipv6opening_no_overlap`; all ports is 1-65535).
    """

    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="ipv6_openings", verbose_name=_("device")
    )
    protocol = models.CharField(_("protocol"), max_length=4, choices=Protocol.choices)
    port_first = models.PositiveIntegerField(_("first port"), null=True, blank=True)
    port_last = models.PositiveIntegerField(_("last port"), null=True, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    description = models.CharField(_("description"), max_length=100, blank=True)
    created_at = models.DateTimeField(_("added"), auto_now_add=True)
    updated_at = models.DateTimeField(_("changed"), auto_now=True)

    objects = Ipv6OpeningQuerySet.as_manager()
    live: Any = None  # as PortForward.live

    class Meta:
        ordering = ["device_id", "port_first", "protocol", "id"]
        verbose_name = _("IPv6 opening")
        verbose_name_plural = _("IPv6 openings")
        constraints = [
            *_port_checks("ipv6opening", "port_first", "port_last", nullable=True),
            models.CheckConstraint(
                condition=Q(port_first__isnull=False) | Q(protocol=Protocol.BOTH),
                name="ipv6opening_all_ports_is_both",
            ),
            models.CheckConstraint(
                condition=Q(protocol__in=Protocol.values), name="ipv6opening_protocol_valid"
            ),
            ExclusionConstraint(
                name="ipv6opening_no_overlap",
                expressions=[
                    ("device", RangeOperators.EQUAL),
                    (
                        Int4Range(
                            models.functions.Coalesce("port_first", Value(1)),
                            models.functions.Coalesce("port_last", Value(65535)),
                            Value("[]"),
                        ),
                        RangeOperators.OVERLAPS,
                    ),
                    (_protocol_span(), RangeOperators.OVERLAPS),
                ],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_protocol_display()} {self.ports or _('all ports')}"

    @property
    def all_ports(self) -> bool:
        return self.port_first is None

    @property
    def ports(self) -> str:
        return port_text(self.port_first, self.port_last)


# The profiles the portal creates itself (migration 0004, seed_demo) read in the reader's language;
# a profile an admin adds is shown as named.
BUILT_IN_PROFILE_NAMES = {
    "Test access": _("Test access"),
    "Test access (slow)": _("Test access (slow)"),
}


def shaping_profile_label(name: str) -> str:
    """A profile's name as the reader reads it ("Testzugang" for the built-in "Test access")."""
    return str(BUILT_IN_PROFILE_NAMES.get(name, name))


class ShapingProfile(models.Model):
    """Rates a shaped member gets (test access), in kbit/s as the compiler's Shaping takes them."""

    name = models.CharField(_("name"), max_length=60, unique=True)
    down_kbit = models.PositiveIntegerField(
        _("download (kbit/s)"), validators=[MinValueValidator(8), MaxValueValidator(400_000_000)]
    )
    up_kbit = models.PositiveIntegerField(
        _("upload (kbit/s)"), validators=[MinValueValidator(8), MaxValueValidator(400_000_000)]
    )
    is_default = models.BooleanField(_("default for new test accesses"), default=False)

    class Meta:
        ordering = ["name"]
        verbose_name = _("shaping profile")
        verbose_name_plural = _("shaping profiles")
        constraints = [
            models.CheckConstraint(
                condition=Q(down_kbit__gte=8, up_kbit__gte=8), name="shapingprofile_rates"
            ),
            models.UniqueConstraint(
                fields=["is_default"],
                condition=Q(is_default=True),
                name="shapingprofile_one_default",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.rates})"

    @property
    def label(self) -> str:
        """The name in the reader's language (built-in profiles are translated)."""
        return shaping_profile_label(self.name)

    @classmethod
    def default(cls) -> ShapingProfile:
        """The default profile; the built-in one (4 Mbit/s down, 1 up) is created on first use."""
        found = cls.objects.filter(is_default=True).first()
        if found is None:
            found, _created = cls.objects.get_or_create(
                name="Test access", defaults={"down_kbit": 4000, "up_kbit": 1000}
            )
        return found

    @property
    def rates(self) -> str:
        """4 Mbit/s down, 1 Mbit/s up, as a person reads it."""

        def fmt(kbit: int) -> str:
            if kbit >= 1000 and kbit % 1000 == 0:
                return f"{kbit // 1000} Mbit/s"
            return f"{kbit} kbit/s"

        return f"↓ {fmt(self.down_kbit)} / ↑ {fmt(self.up_kbit)}"


class BlockedPort(models.Model):
    """Policy: a port range blocked inbound (no forwards or openings) or outbound (e.g. tcp 25)."""

    direction = models.CharField(_("direction"), max_length=8, choices=Direction.choices)
    protocol = models.CharField(_("protocol"), max_length=4, choices=Protocol.choices)
    first = models.PositiveIntegerField(_("first port"))
    last = models.PositiveIntegerField(_("last port"))
    note = models.CharField(_("why"), max_length=200, blank=True)

    class Meta:
        ordering = ["direction", "first", "protocol"]
        verbose_name = _("blocked port range")
        verbose_name_plural = _("blocked port ranges")
        constraints = [
            *_port_checks("blockedport", "first", "last"),
            models.UniqueConstraint(
                fields=["direction", "protocol", "first", "last"], name="blockedport_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_direction_display()}: {self.get_protocol_display()} {self.ports}"

    @property
    def ports(self) -> str:
        return port_text(self.first, self.last)


class ManagementNetwork(models.Model):
    """Policy: a network the firewalls never filter (so nobody locks out the management)."""

    network = CidrField(_("network"), unique=True)
    note = models.CharField(_("why"), max_length=200, blank=True)

    class Meta:
        ordering = ["network"]
        verbose_name = _("management network")
        verbose_name_plural = _("management networks")

    def __str__(self) -> str:
        return str(self.network)
