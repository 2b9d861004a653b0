"""DHCP: the settings Kea's configuration is compiled from, the buildings' registration ranges
(the walled garden for unknown devices) and the leases read back from the hosts."""

from __future__ import annotations

import ipaddress

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.indexes import OpClass
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.core.fields import CidrField, InetAddressField, MacAddressField
from apps.network.models import Subnet
from workers.ruleset.snapshot import CaptivePortalUrl, SnapshotError

DOMAIN_VALIDATOR = RegexValidator(
    r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    _("A domain name in lower case, e.g. dorm.example.org."),
)


def ipv4_list(text: str) -> list[str]:
    """`text` as a list of IPv4 addresses (comma or space separated); ValidationError names the
    first entry that is not one."""
    out = []
    for item in text.replace(",", " ").split():
        try:
            out.append(str(ipaddress.IPv4Address(item)))
        except ValueError:
            raise ValidationError(
                _("%(item)s is not an IPv4 address."), params={"item": item[:40]}
            ) from None
    return out


def validate_ipv4_list(text: str) -> None:
    ipv4_list(text)


# The compiler's refusals of a captive-portal URL (CaptivePortalUrl, English) as the admin form
# says them, in the user's language: (words of the compiler's message, the form's message).
CAPTIVE_URL_REASONS = (
    (
        "does not start with https://",
        _("The URL must start with https:// (RFC 8908 asks for TLS)."),
    ),
    ("is not a domain name", _("The host must be a domain name in lower case, not an IP address.")),
    ("is not a port number", _("The port is not a port number.")),
    ("has characters a URL path", _("The path has characters a URL path cannot have.")),
    (
        "is not an ASCII URL",
        _("Only ASCII characters, at most 255 bytes (all a DHCP option holds)."),
    ),
)


def validate_captive_portal_url(text: str) -> None:
    """The compiler's own check (CaptivePortalUrl): what the form accepts, Kea accepts."""
    if text:
        try:
            CaptivePortalUrl(text)
        except SnapshotError as exc:
            reason = next((m for words, m in CAPTIVE_URL_REASONS if words in str(exc)), None)
            raise ValidationError(reason or str(exc)) from None


class DhcpSettings(models.Model):
    """What Kea hands out (one row; every change reaches the hosts with the next push)."""

    lease_seconds = models.PositiveIntegerField(
        _("lease time of registered devices (seconds)"),
        default=3600,
        validators=[MinValueValidator(60), MaxValueValidator(7 * 86400)],
        help_text=_(
            "Devices renew after half of it; a changed reservation reaches a device at its next "
            "renew at the latest."
        ),
    )
    registration_lease_seconds = models.PositiveIntegerField(
        _("lease time in the registration range (seconds)"),
        default=120,
        validators=[MinValueValidator(30), MaxValueValidator(86400)],
        help_text=_("Short, so a device registered from the walled garden soon gets its address."),
    )
    dns_servers = models.CharField(
        _("DNS servers"),
        max_length=200,
        blank=True,
        validators=[validate_ipv4_list],
        help_text=_(
            "IPv4 addresses, comma separated, for sites whose hosts run no resolver (a site "
            "with resolver addresses hands out those instead); unregistered devices may reach "
            "them too."
        ),
    )
    domain_name = models.CharField(
        _("domain name"), max_length=253, blank=True, validators=[DOMAIN_VALIDATOR]
    )
    portal_addresses = models.CharField(
        _("portal addresses for the walled garden"),
        max_length=200,
        blank=True,
        validators=[validate_ipv4_list],
        help_text=_("IPv4 addresses where unregistered devices reach the portal (TCP 80 and 443)."),
    )
    captive_portal_url = models.CharField(
        _("captive-portal API URL"),
        max_length=255,
        blank=True,
        validators=[validate_captive_portal_url],
        help_text=_(
            "https://<portal name>/api/captive-portal/ (RFC 8908). Set: leases from the "
            "registration ranges carry it (DHCP option 114), and a walled device's HTTP to any "
            "address goes to the first portal address, whose proxy redirects it to the "
            "“not registered” page. Empty: neither."
        ),
    )
    resolver_ratelimit = models.PositiveIntegerField(
        _("resolver: queries per second per device"),
        default=100,
        validators=[MaxValueValidator(1_000_000)],
        help_text=_(
            "Unbound's per-client limit on the sites' resolvers: a device sending more has the "
            "excess dropped (one in ten still answered); 0 turns the limit off."
        ),
    )
    resolver_forwarders = models.CharField(
        _("resolver: forward to"),
        max_length=200,
        blank=True,
        validators=[validate_ipv4_list],
        help_text=_(
            "IPv4 addresses, comma separated: the sites' resolvers send every query there. "
            "Empty: they resolve from the root servers themselves and validate DNSSEC."
        ),
    )
    lease_retention_days = models.PositiveSmallIntegerField(
        _("keep lease history (days)"),
        default=90,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
    )

    class Meta:
        verbose_name = _("DHCP settings")
        verbose_name_plural = _("DHCP settings")
        constraints = [models.CheckConstraint(condition=Q(id=1), name="dhcpsettings_singleton")]

    def __str__(self) -> str:
        return str(_("DHCP settings"))

    @classmethod
    def load(cls) -> DhcpSettings:
        """The settings row, created with the defaults on first use."""
        obj, _created = cls.objects.get_or_create(id=1)
        return obj


class RegistrationRange(models.Model):
    """A building's walled garden: devices without a reservation get a short lease from here
    and reach only the portal and DNS until they are registered."""

    building = models.OneToOneField(
        "members.Building",
        verbose_name=_("building"),
        on_delete=models.CASCADE,
        related_name="registration_range",
    )
    network = CidrField(_("registration range"), unique=True)
    enabled = models.BooleanField(
        _("serve unknown devices"),
        default=True,
        help_text=_("Off: unknown devices of this building get no address at all."),
    )

    class Meta:
        ordering = ["building__code"]
        verbose_name = _("registration range")
        verbose_name_plural = _("registration ranges")
        constraints = [
            ExclusionConstraint(
                name="registrationrange_no_overlap",
                expressions=[(OpClass("network", name="inet_ops"), "&&")],
            ),
            models.CheckConstraint(
                condition=Q(network__regex=r"^[0-9.]+/"), name="registrationrange_ipv4"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.network} ({self.building.code})"

    def clean(self) -> None:
        try:
            net = ipaddress.IPv4Network(str(self.network))
        except ValueError:
            raise ValidationError(
                {"network": _("An IPv4 network such as 10.100.250.0/24.")}
            ) from None
        if net.num_addresses < 4:
            raise ValidationError({"network": _("At least a /30: four addresses.")})
        clash = Subnet.objects.filter(family=4, network__net_overlaps=str(net)).first()
        if clash is not None:
            raise ValidationError(
                {"network": _("Overlaps the subnet %(subnet)s.") % {"subnet": clash}}
            )


class Lease(models.Model):
    """A DHCP lease a host reported: which MAC held which address from when until when."""

    host = models.ForeignKey(
        "firewall.FirewallHost",
        verbose_name=_("host"),
        on_delete=models.SET_NULL,
        null=True,
        related_name="leases",
    )
    host_name = models.CharField(_("host"), max_length=64)
    mac = MacAddressField(_("MAC address"), db_index=True)
    address = InetAddressField(_("address"), protocol="IPv4", db_index=True)
    hostname = models.CharField(_("client name"), max_length=253, blank=True)
    registration = models.BooleanField(_("from a registration range"), default=False)
    starts = models.DateTimeField(_("since"))
    ends = models.DateTimeField(_("until"), db_index=True)
    seen_at = models.DateTimeField(_("last read"))

    class Meta:
        ordering = ["-starts", "-id"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")
        indexes = [models.Index(fields=["host_name", "mac", "address", "-ends"])]

    def __str__(self) -> str:
        return f"{self.address} {self.mac} ({self.host_name})"


class LeaseCursor(models.Model):
    """Where the last stored lease reading of a host ended in its Kea lease file (the helper's
    cursor: file inode, byte position, a fingerprint of the bytes before it). The next reading
    asks only for what Kea wrote after it; the host answers with every lease when the cursor no
    longer fits its file (Kea's lease file cleanup started a new one). Written in the same
    transaction as the leases it covers: a reading that was not stored is asked for again."""

    host = models.OneToOneField(
        "firewall.FirewallHost",
        verbose_name=_("host"),
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="lease_cursor",
    )
    inode = models.BigIntegerField()
    offset = models.BigIntegerField()
    fingerprint = models.BigIntegerField()
    full_at = models.DateTimeField(_("last full reading"), null=True)
    read_at = models.DateTimeField(_("last reading"))

    class Meta:
        verbose_name = _("lease reading position")
        verbose_name_plural = _("lease reading positions")

    def __str__(self) -> str:
        return f"{self.host_id}: {self.inode}@{self.offset}"
