"""Firewall hosts, the rule-set versions compiled for them, and the log of every push."""

from __future__ import annotations

import ipaddress
import zlib

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import connection, models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.core.fields import CidrField
from apps.firewall.choices import PushStatus, PushStep, ShapingRoot, SiteStatus
from workers.ruleset import IFNAME_RE

HOST_PATH_VALIDATOR = RegexValidator(
    r"^/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*$",
    _("An absolute path of letters, digits and _ . + - only."),
)
VIRTUAL_SIDES = ("member", "uplink")


def parse_virtual_addresses(text: str) -> list[tuple[str, str]]:
    """The site's virtual addresses as (side, "address/prefix") pairs; ValueError naming the
    line that is wrong."""
    pairs = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in VIRTUAL_SIDES or "/" not in parts[1]:
            raise ValueError(
                _('Line %(n)s: write "member ADDRESS/PREFIX" or "uplink ADDRESS/PREFIX".')
                % {"n": number}
            )
        try:
            iface = ipaddress.ip_interface(parts[1])
        except ValueError:
            raise ValueError(
                _("Line %(n)s: %(value)s is not an address with its prefix length.")
                % {"n": number, "value": parts[1]}
            ) from None
        pairs.append((parts[0], str(iface)))
    return pairs


def validate_virtual_addresses(text: str) -> None:
    try:
        parse_virtual_addresses(text)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class Site(models.Model):
    """A group of hosts that serve the same buildings (e.g. an HA pair): one bundle per host,
    one lock, one rollout order and one state per site; sites roll out independently."""

    name = models.SlugField(_("name"), max_length=64, unique=True)
    buildings = models.ManyToManyField(
        "members.Building",
        verbose_name=_("buildings served"),
        blank=True,
        related_name="firewall_sites",
        help_text=_(
            "Its hosts receive only the members and subnets of these buildings. None selected: "
            "every building."
        ),
    )
    status = models.CharField(
        _("rollout state"), max_length=16, choices=SiteStatus.choices, default=SiteStatus.IDLE
    )
    status_reason = models.TextField(_("reason"), blank=True)
    status_at = models.DateTimeField(_("state since"), null=True, blank=True)
    member_network4 = CidrField(
        _("member network (IPv4)"),
        default="10.100.0.0/16",
        db_default="10.100.0.0/16",
        help_text=_(
            "The member side's IPv4 network as DHCP hands it out: it holds the buildings' "
            "subnets and registration ranges, and the gateway."
        ),
    )
    gateway4 = models.GenericIPAddressField(
        _("gateway (IPv4)"),
        protocol="IPv4",
        default="10.100.0.1",
        db_default="10.100.0.1",
        help_text=_("The router DHCP names: the pair's virtual address on the member side."),
    )
    # The pair's failover (keepalived + conntrackd; docs/ha.md). Empty: no virtual addresses,
    # the site's hosts run no VRRP.
    virtual_addresses = models.TextField(
        _("virtual addresses"),
        blank=True,
        default="",
        db_default="",
        validators=[validate_virtual_addresses],
        help_text=_(
            'One per line: "member ADDRESS/PREFIX" or "uplink ADDRESS/PREFIX", e.g. '
            '"member 10.100.0.1/16". They follow the primary of their family (IPv4 or IPv6). '
            "Empty: no failover."
        ),
    )
    vrrp_id = models.PositiveSmallIntegerField(
        _("VRRP router id"),
        default=51,
        db_default=51,
        validators=[MinValueValidator(1), MaxValueValidator(255)],
    )
    vrrp_advert_ms = models.PositiveIntegerField(
        _("VRRP advert interval (ms)"),
        default=100,
        db_default=100,
        validators=[MinValueValidator(10), MaxValueValidator(40950)],
        help_text=_(
            "The backup takes over after three missed adverts: 100 ms gives about 0.35 s. "
            "A multiple of 10 ms (VRRPv3)."
        ),
    )
    vrrp_preempt = models.BooleanField(
        _("primary takes its role back"),
        default=True,
        db_default=True,
        help_text=_("After it returns, the primary of a family takes the role back (failback)."),
    )
    vrrp_preempt_delay = models.PositiveSmallIntegerField(
        _("failback delay (s)"),
        default=2,
        db_default=2,
        validators=[MaxValueValidator(1000)],
        help_text=_("Time for a returning host to receive the connection states first."),
    )
    # The software flowtable for established flows (docs/ruleset.md, "Fast path"): off until
    # proved on the site's kernel (CONFIG_NF_FLOW_TABLE; Debian's kernel has it).
    fast_path = models.BooleanField(
        _("fast path for established flows"),
        default=False,
        db_default=False,
        help_text=_(
            "Established TCP/UDP flows of unshaped members bypass the forward and postrouting "
            "rules (an nftables flowtable). Needs a kernel with flowtables. While on, the "
            "per-member traffic figures count only the first packets of such flows."
        ),
    )
    ipv4_primary = models.ForeignKey(
        "firewall.FirewallHost",
        verbose_name=_("IPv4 primary"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("Empty: the first host in rollout order."),
    )
    ipv6_primary = models.ForeignKey(
        "firewall.FirewallHost",
        verbose_name=_("IPv6 primary"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("Empty: the second host in rollout order."),
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("site")
        verbose_name_plural = _("sites")

    def __str__(self) -> str:
        return self.name

    @classmethod
    def default_pk(cls) -> int:
        """The site new hosts join unless told otherwise ("main", serving every building).

        Migrations call this too (firewall 0008's default), with the table as it was then: it
        selects only the id and inserts only the columns 0008 knew, so every later NOT NULL
        column of Site needs a `db_default`."""
        main = cls.objects.filter(name="main").values_list("pk", flat=True)
        pk = main.first()
        if pk is None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO firewall_site (name, status, status_reason) VALUES (%s, %s, '') "
                    "ON CONFLICT (name) DO NOTHING",
                    ["main", SiteStatus.IDLE],
                )
            pk = main.get()
        return pk

    def mark(self, status: str, reason: str = "") -> None:
        """Record where the site's rollout stands."""
        self.status, self.status_reason, self.status_at = status, reason[:4000], timezone.now()
        self.save(update_fields=["status", "status_reason", "status_at"])


class FirewallHost(models.Model):
    """A firewall the portal pushes to over SSH (forced command: deploy/firewall/portal-fw)."""

    name = models.SlugField(_("name"), max_length=64, unique=True)
    address = models.GenericIPAddressField(_("management address"))
    port = models.PositiveIntegerField(_("SSH port"), default=22)
    ssh_user = models.CharField(_("SSH user"), max_length=32, default="root")
    rollout_order = models.PositiveSmallIntegerField(
        _("rollout order"),
        default=0,
        help_text=_("Lower goes first; each host is checked before the next."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    member_interfaces = models.CharField(
        _("member-side interfaces"), max_length=200, default="dorm0"
    )
    uplink_interfaces = models.CharField(_("uplink interfaces"), max_length=200, default="inet0")
    management_interfaces = models.CharField(
        _("management interfaces"),
        max_length=200,
        blank=True,
        help_text=_(
            "Where the management network arrives; only from there may it reach members. Empty: "
            "management addresses pass between the member and uplink sides only."
        ),
    )
    shaping_root = models.CharField(
        _("shaping layout"),
        max_length=8,
        choices=ShapingRoot.choices,
        default=ShapingRoot.HTB,
        help_text=_(
            "mq needs network cards with several transmit queues and a queue selection that "
            "follows the member (see docs/ruleset.md)."
        ),
    )
    tx_queues = models.PositiveSmallIntegerField(
        _("transmit queues"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text=_("Hardware transmit queues of the shaping interfaces (mq only; 1 for HTB)."),
    )
    link_kbit = models.PositiveIntegerField(
        _("link rate (kbit/s)"),
        default=10_000_000,
        validators=[MinValueValidator(1), MaxValueValidator(400_000_000)],
        help_text=_("What the shaping interfaces carry in total; unshaped traffic shares it."),
    )
    site = models.ForeignKey(
        Site,
        verbose_name=_("site"),
        on_delete=models.PROTECT,
        related_name="hosts",
        default=Site.default_pk,
        help_text=_("Hosts of one site serve the same buildings and roll out one after another."),
    )
    pinned_version = models.ForeignKey(
        "firewall.RuleSetVersion",
        verbose_name=_("pinned to"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("Automatic pushes skip a pinned host until someone unpins it."),
    )
    pinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("pinned by"),
    )
    pinned_at = models.DateTimeField(_("pinned at"), null=True, blank=True)
    serves_dhcp = models.BooleanField(
        _("DHCP server"),
        default=False,
        help_text=_(
            "The host runs Kea: its bundle carries the DHCP configuration (the helper on the "
            "host must declare the kea-dhcp4 artefact)."
        ),
    )
    dhcp_interfaces = models.CharField(
        _("DHCP interfaces"),
        max_length=200,
        blank=True,
        help_text=_("Where Kea answers; empty: every member-side interface."),
    )
    kea_control_socket = models.CharField(
        _("Kea control socket"),
        max_length=100,
        default="/run/kea/kea4-ctrl-socket",
        validators=[HOST_PATH_VALIDATOR],
    )
    ra_pid_file = models.CharField(
        _("RA daemon pid file"),
        max_length=100,
        default="/run/portal-ra.pid",
        validators=[HOST_PATH_VALIDATOR],
        help_text=_(
            "deploy/firewall/portal-ra: router advertisements with each device's room /64."
        ),
    )
    kea_lease_file = models.CharField(
        _("Kea lease file"),
        max_length=100,
        default="/var/lib/kea/kea-leases4.csv",
        validators=[HOST_PATH_VALIDATOR],
    )
    sync_interface = models.CharField(
        _("sync link interface"),
        max_length=15,
        blank=True,
        help_text=_(
            "The pair's dedicated link (VRRP adverts, conntrackd). Empty: this host takes no "
            "part in failover."
        ),
    )
    sync_address4 = models.GenericIPAddressField(
        _("sync link address (IPv4)"), protocol="IPv4", null=True, blank=True
    )
    sync_address6 = models.GenericIPAddressField(
        _("sync link address (IPv6)"),
        protocol="IPv6",
        null=True,
        blank=True,
        help_text=_("Needed when the site has IPv6 virtual addresses."),
    )
    ha_run_dir = models.CharField(
        _("HA state directory"),
        max_length=100,
        default="/run/portal-ha",
        validators=[HOST_PATH_VALIDATOR],
    )
    ha_notify = models.CharField(
        _("HA notify program"),
        max_length=100,
        default="/usr/local/sbin/portal-ha",
        validators=[HOST_PATH_VALIDATOR],
    )
    conntrackd_config = models.CharField(
        _("conntrackd configuration"),
        max_length=100,
        default="/etc/conntrackd/conntrackd.conf",
        validators=[HOST_PATH_VALIDATOR],
    )
    # The members' resolver (Unbound; docs/dns.md): listens on the host's own member-side
    # address; the site's leases name every resolver of the site.
    resolver_address = models.GenericIPAddressField(
        _("resolver address"),
        protocol="IPv4",
        null=True,
        blank=True,
        help_text=_(
            "This host's own address on the member side, where its resolver (Unbound) answers "
            "the members; the site's leases name every resolver of the site. Empty: no resolver "
            "on this host (the helper on the host must declare the unbound artefact)."
        ),
    )
    unbound_control_socket = models.CharField(
        _("Unbound control socket"),
        max_length=100,
        default="/run/unbound.ctl",
        validators=[HOST_PATH_VALIDATOR],
    )
    unbound_pid_file = models.CharField(
        _("Unbound pid file"),
        max_length=100,
        default="/run/unbound.pid",
        validators=[HOST_PATH_VALIDATOR],
    )
    unbound_user = models.CharField(
        _("Unbound user"),
        max_length=32,
        default="unbound",
        blank=True,
        validators=[RegexValidator(r"^[a-z_][a-z0-9_-]{0,31}$", _("A system user name."))],
        help_text=_("The user Unbound drops to after it bound its port; empty: it stays root."),
    )
    # The digest the host read back right after it applied its confirmed bundle, and the parts
    # of its newest read-back that differ from it (drift by content; empty: it matched).
    confirmed_digest = models.JSONField(_("confirmed digest"), default=dict, blank=True)
    drift = models.JSONField(_("drifted parts"), default=list, blank=True)
    digest_checked_at = models.DateTimeField(_("content checked"), null=True, blank=True)

    push_status = models.CharField(
        _("push status"), max_length=16, choices=PushStatus.choices, default=PushStatus.PENDING
    )
    applied_version = models.ForeignKey(
        "firewall.RuleSetVersion",
        verbose_name=_("applied version"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    applied_checksum = models.CharField(_("applied checksum"), max_length=64, blank=True)
    error_reason = models.TextField(_("error"), blank=True)
    last_push_at = models.DateTimeField(_("last push"), null=True, blank=True)
    applied_at = models.DateTimeField(_("applied since"), null=True, blank=True)

    class Meta:
        ordering = ["rollout_order", "name"]
        verbose_name = _("firewall host")
        verbose_name_plural = _("firewall hosts")

    def __str__(self) -> str:
        return self.name

    def interface_names(self, field: str) -> tuple[str, ...]:
        """The comma-separated interface names of `field`, stripped."""
        return tuple(n.strip() for n in getattr(self, field).split(",") if n.strip())

    def clean(self) -> None:
        """The checks the compiler applies to its host, as form errors (nothing is pushed
        with settings the compiler would refuse)."""
        errors: dict[str, str] = {}
        for field in ("member_interfaces", "uplink_interfaces"):
            names = self.interface_names(field)
            if not names or not all(IFNAME_RE.fullmatch(n) for n in names):
                errors[field] = _(
                    "One or more interface names, separated by commas, each 1 to 15 characters "
                    "of A-Z a-z 0-9 _ . -"
                )
        both = set(self.interface_names("member_interfaces")) & set(
            self.interface_names("uplink_interfaces")
        )
        if both and "uplink_interfaces" not in errors:
            errors["uplink_interfaces"] = _("%(name)s is also a member-side interface.") % {
                "name": sorted(both)[0]
            }
        for field in ("management_interfaces", "dhcp_interfaces"):
            names = self.interface_names(field)
            if not all(IFNAME_RE.fullmatch(n) for n in names):
                errors[field] = _(
                    "Interface names, separated by commas, each 1 to 15 characters of "
                    "A-Z a-z 0-9 _ . -"
                )
        data_sides = {
            *self.interface_names("member_interfaces"),
            *self.interface_names("uplink_interfaces"),
        }
        clash = set(self.interface_names("management_interfaces")) & data_sides
        if clash and "management_interfaces" not in errors:
            errors["management_interfaces"] = _("%(name)s is also a data interface.") % {
                "name": sorted(clash)[0]
            }
        if self.sync_interface and not IFNAME_RE.fullmatch(self.sync_interface):
            errors["sync_interface"] = _("1 to 15 characters of A-Z a-z 0-9 _ . -")
        elif self.sync_interface in data_sides:
            errors["sync_interface"] = _("%(name)s is also a data interface.") % {
                "name": self.sync_interface
            }
        if self.sync_interface and not self.sync_address4:
            errors["sync_address4"] = _("The sync link needs this host's IPv4 address on it.")
        if self.shaping_root == ShapingRoot.HTB and self.tx_queues != 1:
            errors["tx_queues"] = _("One HTB has one queue: choose the mq layout for more.")
        if errors:
            raise ValidationError(errors)

    def runs(self, content_hash: str) -> bool:
        """The host confirmed exactly this bundle and nothing failed since."""
        return self.push_status == PushStatus.APPLIED and self.applied_checksum == content_hash

    @property
    def holds_confirmed(self) -> bool:
        """The host runs a confirmed version (the base for incremental pushes)."""
        return self.push_status == PushStatus.APPLIED and bool(self.applied_version_id)

    @property
    def is_pinned(self) -> bool:
        """Staff put a version back and hold the host there."""
        return self.pinned_version_id is not None

    def mark_pending(self) -> None:
        """A newer version waits for this host."""
        self.push_status = PushStatus.PENDING
        self.save(update_fields=["push_status"])

    def mark_applied(self, version: RuleSetVersion, *, digest: dict | None = None) -> None:
        """The host confirmed `version`; `digest`: what it read back right after the apply."""
        now = timezone.now()
        self.confirmed_digest = digest or {}
        self.drift = []
        self.digest_checked_at = now if digest else None
        self.push_status = PushStatus.APPLIED
        self.applied_version = version
        self.applied_checksum = version.content_hash
        self.error_reason = ""
        self.last_push_at = now
        self.applied_at = now
        self.save(
            update_fields=[
                "push_status",
                "applied_version",
                "applied_checksum",
                "error_reason",
                "last_push_at",
                "applied_at",
                "confirmed_digest",
                "drift",
                "digest_checked_at",
            ]
        )

    def mark_error(self, reason: str, *, unreachable: bool = False) -> None:
        """The last push failed; the host keeps (or was rolled back to) its previous version."""
        self.push_status = PushStatus.UNREACHABLE if unreachable else PushStatus.ERROR
        self.error_reason = reason[:4000]
        self.last_push_at = timezone.now()
        self.save(update_fields=["push_status", "error_reason", "last_push_at"])


class RuleSetVersion(models.Model):
    """One compiled rule set for one host: the text that was (or is to be) loaded there."""

    host = models.ForeignKey(
        FirewallHost, verbose_name=_("host"), on_delete=models.CASCADE, related_name="versions"
    )
    content_hash = models.CharField(_("content hash"), max_length=64)
    nft_text = models.TextField(_("nft transaction"))
    tc_text = models.TextField(_("tc batch"), blank=True)
    # Further artefacts of the bundle (configuration files: Kea, keepalived, ...), name -> text.
    files = models.JSONField(_("configuration files"), default=dict, blank=True)
    # sha256 of each artefact ("nft", "tc", and each file's name): what changed between versions.
    artefact_hashes = models.JSONField(_("artefact hashes"), default=dict, blank=True)
    counts = models.JSONField(_("element counts"), default=dict)
    size_bytes = models.PositiveIntegerField(_("size"), default=0)
    compile_seconds = models.FloatField(_("compile time"), default=0)
    cause = models.CharField(_("cause"), max_length=500, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    # The database state it was compiled from: every row changed before this is in it.
    snapshot_at = models.DateTimeField(_("snapshot time"), default=timezone.now)
    # The compiler's input (zlib-compressed Snapshot JSON) for incremental transactions from
    # this version; kept for the newest few versions only.
    snapshot_json = models.BinaryField(_("snapshot"), null=True, blank=True, editable=False)
    # A rollout stores the texts beside its pushes (apps.firewall.versions.version_texts_write):
    # True until they are written. A version whose worker stopped before that is never pushed.
    texts_pending = models.BooleanField(_("texts not stored yet"), default=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("rule-set version")
        verbose_name_plural = _("rule-set versions")
        indexes = [models.Index(fields=["host", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.host} #{self.pk} {self.content_hash[:12]}"

    @property
    def applied_as_increment(self) -> bool:
        """A delta version (apps.firewall.compiled.delta_compile): pushed as an increment and
        stored without its texts (size 0) until the host's next full compile renders them."""
        return self.texts_pending and self.size_bytes == 0

    @property
    def element_count(self) -> int:
        """Set and map elements of the rule set (its size in the kernel)."""
        return sum(
            n
            for key, n in self.counts.items()
            if key.startswith("portal_") and not key.endswith((".rules", ".version"))
        )

    @property
    def shaping_classes(self) -> int:
        """HTB classes of the shaping set-up (over all interfaces)."""
        return int(self.counts.get("htb.classes", 0))

    @property
    def compile_milliseconds(self) -> int:
        return round(self.compile_seconds * 1000)

    def snapshot_text(self) -> str | None:
        """The stored Snapshot JSON, or None when it was not kept."""
        if not self.snapshot_json:
            return None
        return zlib.decompress(bytes(self.snapshot_json)).decode("ascii")


class PushLogEntry(models.Model):
    """One step of one push to one host (what the push log screen lists)."""

    host = models.ForeignKey(FirewallHost, on_delete=models.CASCADE, related_name="push_log")
    version = models.ForeignKey(
        RuleSetVersion, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    step = models.CharField(max_length=16, choices=PushStep.choices)
    ok = models.BooleanField()
    message = models.TextField(blank=True)
    seconds = models.FloatField(default=0)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["host", "-at"])]
        verbose_name = _("push log entry")
        verbose_name_plural = _("push log entries")

    def __str__(self) -> str:
        return f"{self.host} {self.step} {'ok' if self.ok else 'failed'}"


class MemberRevision(models.Model):
    """Bumped by PostgreSQL triggers whenever a member's devices, port forwards or IPv6
    openings change (insert, update, delete, truncate; by the ORM or by hand), so the snapshot
    reader rebuilds only the members whose rows changed. Written only by the triggers of
    migration 0004: Django never saves it (a stale save could hide a change)."""

    member = models.OneToOneField(
        "members.Member",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="firewall_revision",
    )
    revision = models.BigIntegerField()

    class Meta:
        managed = False
        db_table = "firewall_member_rev"

    def __str__(self) -> str:
        return f"member #{self.pk} revision {self.revision}"
