"""The only bridge from the database to the compiler: a few queries -> typed Snapshot values.

Members are read from one consistent view of the database and kept per process
(`PUSH_MEMO.members`, memo.py): a member whose row and trigger-kept revision (migration 0004)
are unchanged is reused as is.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.firewall.extensions import DhcpRead, snapshot_dhcp_read
from apps.firewall.memo import PUSH_MEMO, DhcpBuilt, MemberCache
from apps.firewall.models import FirewallHost, parse_virtual_addresses
from apps.firewall.resolver import all_resolver_addresses, lease_dns_servers, resolver_build
from apps.members.choices import NETWORKED_STATUSES
from apps.members.models import Member
from apps.network.models import (
    BlockedPort,
    Device,
    Ipv6Opening,
    ManagementNetwork,
    NetworkSettings,
    PortForward,
    PublicPool,
    ShapingProfile,
    Subnet,
)
from workers import ruleset as rs

log = structlog.get_logger(__name__)

# Which of a networked member's rows the snapshot carries (the reader and the live state agree).
FORWARD_CARRIED = Q(enabled=True, device__isnull=False, public_address__isnull=False)
OPENING_CARRIED = Q(enabled=True)


def carried_rows(model: Any) -> tuple[Q, str]:
    """The filter of `model`'s rows (Device, PortForward, Ipv6Opening) that a snapshot carries,
    and the path to their member's status."""
    name = model.__name__
    if name == "Ipv6Opening":
        return OPENING_CARRIED & Q(device__member__status__in=NETWORKED_STATUSES), (
            "device__member__status"
        )
    if name == "PortForward":
        return FORWARD_CARRIED & Q(member__status__in=NETWORKED_STATUSES), "member__status"
    return Q(member__status__in=NETWORKED_STATUSES), "member__status"


@dataclass(frozen=True)
class SnapshotData:
    """What every host's snapshot shares: read once per compile."""

    policy: rs.Policy
    members: tuple[rs.Member, ...]
    private_networks: tuple[str, ...]
    public_networks: tuple[str, ...]
    taken_at: datetime
    building_of: dict[int, int | None] = field(default_factory=dict)  # member id -> building
    private_by_building: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # DHCP: every networked member's (MAC, private IPv4) pairs, the buildings' enabled
    # registration ranges and the DHCP settings row.
    reservations_of: dict[int, tuple[tuple[str, str, str | None], ...]] = field(
        default_factory=dict
    )
    dhcp: DhcpRead | None = None
    # Per set of buildings, the answer of for_buildings: the hosts of one site (the HA pair) get
    # the very same tuple, which lets the compiler reuse the first host's member sets.
    _by_buildings: dict[frozenset[int], tuple[tuple[rs.Member, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def for_buildings(self, buildings: set[int]) -> tuple[tuple[rs.Member, ...], tuple[str, ...]]:
        """The members and private networks of a site (`buildings` empty: everything)."""
        if not buildings:
            return self.members, self.private_networks
        key = frozenset(buildings)
        found = self._by_buildings.get(key)
        if found is not None:
            return found
        building_of = self.building_of
        members = tuple(m for m in self.members if building_of.get(m.id) in buildings)
        private = tuple(
            net for b in sorted(buildings) for net in self.private_by_building.get(b, ())
        )
        self._by_buildings[key] = (members, private)
        return members, private


DEFAULT_SHAPING_KBIT = (4000, 1000)  # ShapingProfile.default()'s built-in rates
FULL_READ_SHARE = 0.2  # above this share of changed members, read all rows instead of by id
BY_ID_MAX = 1000  # ... when they are more than these many


# A member's own row; with the default shaping profile (test accesses) it is the cache key.
MEMBER_COLUMNS = (
    "id",
    "status",
    "public_ipv4__address",
    "room__ipv6_prefix",
    "test_access__profile__down_kbit",
    "test_access__profile__up_kbit",
    "room__building_id",
    "firewall_revision__revision",
)
_BUILDING = MEMBER_COLUMNS.index("room__building_id")


def snapshot_cache_clear() -> None:
    """Forget this process's typed members (the next read builds every member again)."""
    PUSH_MEMO.members.clear()


def snapshot_data_read(*, cached: bool = True, since_last: bool = False) -> SnapshotData:
    """Read policy, members, addresses, devices, forwards, openings and shaping in a handful
    of queries, from one consistent view of the database.

    With `cached` (the default), members whose rows did not change since this process's last
    read are reused and only the changed ones are read again (by id). Which ones changed:
    every networked member's key row is read and compared (a checking read, the default: what
    full compiles use), or, with `since_last`, only the members whose revision a transaction
    wrote that the last read's database snapshot did not see (migration firewall 0019): a few
    rows whatever the number of members. `since_last` reads check every key when this process
    has no snapshot yet (its first read, a read inside a caller's transaction, a new epoch).
    `cached=False` builds every member from the database without touching the cache.
    """
    cache = PUSH_MEMO.members if cached else MemberCache()
    taken_at = timezone.now()
    outermost = not connection.in_atomic_block
    with cache.lock, transaction.atomic():
        if outermost:  # one consistent view of all tables while they change underneath
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        with connection.cursor() as cursor:  # epoch: bumped by TRUNCATE (see migration 0004)
            cursor.execute(
                "SELECT epoch, pg_current_snapshot()::text FROM firewall_member_rev_epoch"
            )
            epoch, db_snapshot = cursor.fetchone()
        default_profile = _default_profile()
        if epoch != cache.epoch:
            cache.forget()
            cache.epoch = epoch
        written = None  # the members written since the cache's snapshot
        if outermost and cache.snapshot is not None:
            written = _members_written_since(cache.snapshot)
            if default_profile != cache.default_profile:  # a test access without a profile
                written.update(mid for mid, key in cache.keys.items() if key[1] == "test")
        try:
            if (
                since_last
                and written is not None
                and len(written) <= max(BY_ID_MAX, FULL_READ_SHARE * len(cache.keys))
            ):
                if written:
                    _members_update(cache, sorted(written), default_profile)
            else:  # (a bulk change too: reading every key is cheaper than by id)
                touched = _members_check(cache, default_profile)
                if written is not None and (unnamed := sorted(set(touched) - written)):
                    # A change behind the triggers' back (they were disabled, a restore):
                    # a read since the last one would not have seen it; this one repaired it.
                    log.warning(
                        "firewall.snapshot_unnamed_change", count=len(unnamed), members=unnamed[:20]
                    )
        except BaseException:
            cache.snapshot = None  # partly updated: the next read checks every key
            raise
        # Only a read in a transaction of its own describes a snapshot others' changes are
        # measured against (a caller's transaction may write, or roll back what was read).
        cache.snapshot = db_snapshot if outermost else None
        cache.default_profile = default_profile
        members = tuple(cache.members.values())
        reservations_of = dict(cache.reservations)
        building_of = dict(cache.buildings)
        blocked: dict[str, list[rs.PortRule]] = {"inbound": [], "outbound": []}
        for direction, protocol, first, last in BlockedPort.objects.values_list(
            "direction", "protocol", "first", "last"
        ):
            blocked[direction].append(rs.PortRule(protocol, (first, last)))
        management = [
            *ManagementNetwork.objects.values_list("network", flat=True),
            *settings.PORTAL_MANAGEMENT_NETWORKS,
        ]
        private_by_building: dict[int, list[str]] = defaultdict(list)
        for building_id, network in Subnet.objects.filter(family=4).values_list(
            "building_id", "network"
        ):
            private_by_building[building_id].append(network)
        private = tuple(net for nets in private_by_building.values() for net in nets)
        public = tuple(PublicPool.objects.values_list("network", flat=True))
        # Read only (this transaction is read-only): the defaults until an admin saved the row.
        dhcp = snapshot_dhcp_read()  # the dhcp app's part (apps/firewall/extensions.py)
        # The sites' own resolvers and the external ones: DNS to either is untracked.
        dns_servers = tuple(dict.fromkeys((*dhcp.dns_servers, *all_resolver_addresses())))
        network_settings = NetworkSettings.objects.filter(id=1).first() or NetworkSettings(id=1)
    policy = rs.Policy(
        management_networks=tuple(dict.fromkeys(management)),
        blocked_outbound=tuple(blocked["outbound"]),
        blocked_inbound=tuple(blocked["inbound"]),
        registration_networks=tuple(dhcp.registration_by_building.values()),
        portal_addresses=dhcp.portal_addresses,
        dns_servers=dns_servers,
        captive_proxy=dhcp.captive_proxy,
        conntrack_quota_out=network_settings.conntrack_quota_devices,
        conntrack_quota_in=network_settings.conntrack_quota_forwards,
        syn_proxy=network_settings.syn_proxy,
    )
    return SnapshotData(
        policy,
        members,
        private,
        public,
        taken_at,
        building_of=building_of,
        private_by_building={b: tuple(nets) for b, nets in private_by_building.items()},
        reservations_of=reservations_of,
        dhcp=dhcp,
    )


def _default_profile() -> tuple[int, int]:
    """The test accesses' shaping rates when a member's own profile names none."""
    return tuple(  # type: ignore[return-value]
        ShapingProfile.objects.filter(is_default=True).values_list("down_kbit", "up_kbit").first()
        or ShapingProfile.objects.filter(name="Test access")
        .values_list("down_kbit", "up_kbit")
        .first()
        or DEFAULT_SHAPING_KBIT
    )


def _members_written_since(db_snapshot: str) -> set[int]:
    """The members whose revision a transaction wrote that `db_snapshot` did not see (in
    progress then, or begun after): committed now, in whatever order (the index on `xid`
    bounds the rows looked at to those of transactions from the snapshot's oldest on)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT member_id FROM firewall_member_rev"
            " WHERE xid >= pg_snapshot_xmin(%s::pg_snapshot)"
            " AND NOT pg_visible_in_snapshot(xid, %s::pg_snapshot)",
            [db_snapshot, db_snapshot],
        )
        return {row[0] for row in cursor.fetchall()}


def _member_key(row: tuple[Any, ...], default_profile: tuple[int, int]) -> tuple[Any, ...]:
    return (*row, tuple(default_profile) if row[1] == "test" else None)


def _members_check(cache: MemberCache, default_profile: tuple[int, int]) -> list[int]:
    """Read every networked member's key row and rebuild those whose key changed; returns the
    members changed or gone."""
    member_rows = _rows(
        Member.objects.filter(status__in=NETWORKED_STATUSES).values_list(*MEMBER_COLUMNS)
    )
    keys = {row[0]: _member_key(row, default_profile) for row in member_rows}
    known = cache.keys
    changed = [mid for mid, key in keys.items() if known.get(mid) != key]
    if changed:
        by_id = None if len(changed) > FULL_READ_SHARE * len(keys) else changed
        _members_build(cache, keys, changed, by_id)
    if changed or list(known) != list(keys):  # (id order; gone members dropped)
        members, reservations = cache.members, cache.reservations
        cache.members = {mid: members[mid] for mid in keys}
        cache.reservations = {mid: reservations[mid] for mid in keys}
        gone = [mid for mid in known if mid not in keys]
        cache.keys = keys
        cache.buildings = {mid: key[_BUILDING] for mid, key in keys.items()}
        return changed + gone
    return changed


def _members_update(cache: MemberCache, ids: list[int], default_profile: tuple[int, int]) -> None:
    """Read the key rows of the members `ids` (in id order) alone: rebuild the networked ones
    whose key changed, drop the others from the cache."""
    rows = _rows(
        Member.objects.filter(id__in=ids, status__in=NETWORKED_STATUSES).values_list(
            *MEMBER_COLUMNS
        )
    )
    keys = {row[0]: _member_key(row, default_profile) for row in rows}
    known = cache.keys
    for gone in (mid for mid in ids if mid in known and mid not in keys):
        del known[gone], cache.members[gone], cache.reservations[gone], cache.buildings[gone]
    changed = [mid for mid, key in keys.items() if known.get(mid) != key]
    if not changed:
        return
    last = next(reversed(known), 0)
    new = [mid for mid in changed if mid not in known]
    _members_build(cache, keys, changed, changed)
    for mid in changed:
        cache.buildings[mid] = keys[mid][_BUILDING]
    if new and new[0] < last:  # a member came back (a lower id than the last): id order again
        order = sorted(known)
        cache.keys = {mid: known[mid] for mid in order}
        cache.members = {mid: cache.members[mid] for mid in order}
        cache.reservations = {mid: cache.reservations[mid] for mid in order}
        cache.buildings = {mid: cache.buildings[mid] for mid in order}


def _members_build(
    cache: MemberCache,
    keys: dict[int, tuple[Any, ...]],
    changed: list[int],
    by_id: list[int] | None,
) -> None:
    """Build the `changed` members from their parts (read by id, or all with `by_id` None)."""
    with rs.gc_paused():
        devices, forwards, openings, macs = _member_parts_read(by_id)
        for mid in changed:
            cache.members[mid] = _member_build(keys[mid], devices, forwards, openings)
            cache.reservations[mid] = tuple(macs.get(mid, ()))
            cache.keys[mid] = keys[mid]


def snapshot_members_read(
    member_ids: Iterable[int], *, buildings: set[int] | None = None
) -> dict[int, rs.Member | None]:
    """The typed values of the given members now, read by id in one consistent view (four
    small queries whatever the site's size): the delta compile's input
    (`workers.ruleset.delta`). None for a member that is not networked (any more) or not in
    `buildings` (the host's site; None or empty: every building). Built exactly as
    `snapshot_data_read` builds them; this process's member cache is not touched."""
    ids = sorted(set(member_ids))
    found: dict[int, rs.Member | None] = dict.fromkeys(ids)
    if not ids:
        return found
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        rows = _rows(
            Member.objects.filter(id__in=ids, status__in=NETWORKED_STATUSES).values_list(
                *MEMBER_COLUMNS
            )
        )
        if buildings:
            rows = [row for row in rows if row[_BUILDING] in buildings]
        if not rows:
            return found
        default = _default_profile() if any(row[1] == "test" for row in rows) else None
        devices, forwards, openings, _macs = _member_parts_read([row[0] for row in rows])
    for row in rows:
        key = (*row, default if row[1] == "test" else None)
        found[row[0]] = _member_build(key, devices, forwards, openings)
    return found


_Parts = dict[int, list[Any]]


def _member_parts_read(member_ids: list[int] | None) -> tuple[_Parts, _Parts, _Parts, _Parts]:
    """Typed devices, enabled forwards and openings per member id, and each device's
    (MAC, IPv4) for DHCP: of networked members (`member_ids` None) or of the given members.
    Three queries."""

    if member_ids is None:
        mine = Q(member__status__in=NETWORKED_STATUSES)
        mine_via_device = Q(device__member__status__in=NETWORKED_STATUSES)
    else:
        mine = Q(member_id__in=member_ids)
        mine_via_device = Q(device__member_id__in=member_ids)
    device = rs.Device
    devices: _Parts = defaultdict(list)
    macs: _Parts = defaultdict(list)
    for member_id, device_id, ipv4, ipv6, mac in _rows(
        Device.objects.filter(mine).values_list("member_id", "id", "ipv4", "ipv6", "mac")
    ):
        devices[member_id].append(device(device_id, ipv4, (ipv6,) if ipv6 else ()))
        macs[member_id].append((mac, ipv4, ipv6))
    forward, port_range = rs.PortForward, rs.port_range
    forwards: _Parts = defaultdict(list)
    for member_id, fid, protocol, p1, p2, device_id, t1, t2 in _rows(
        PortForward.objects.filter(mine, FORWARD_CARRIED).values_list(
            "member_id",
            "id",
            "protocol",
            "public_first",
            "public_last",
            "device_id",
            "target_first",
            "target_last",
        )
    ):
        try:  # the forward's name only for the message (an f-string per row is not free)
            public, target = port_range(p1, p2), port_range(t1, t2)
        except rs.SnapshotError:
            public = port_range(p1, p2, f"port forward #{fid} public ports")
            target = port_range(t1, t2, f"port forward #{fid} target ports")
        forwards[member_id].append(forward(fid, protocol, public, device_id, target))
    openings: _Parts = defaultdict(list)
    for member_id, oid, device_id, protocol, first, last in _rows(
        Ipv6Opening.objects.filter(mine_via_device, OPENING_CARRIED).values_list(
            "device__member_id", "id", "device_id", "protocol", "port_first", "port_last"
        )
    ):
        ports = None
        if first is not None:
            try:
                ports = port_range(first, last)  # shared
            except rs.SnapshotError:
                ports = (first, last)  # the Opening names itself in the message
        openings[member_id].append(rs.Opening(oid, device_id, protocol, ports))
    return devices, forwards, openings, macs


def _member_build(
    key: tuple[Any, ...], devices: _Parts, forwards: _Parts, openings: _Parts
) -> rs.Member:
    member_id, status, public_ipv4, prefix, down, up, _building, _revision, default_profile = key
    shaping = None
    if status == "test":
        shaping = rs.Shaping(*(down, up) if down and up else default_profile)
    return rs.Member(
        id=member_id,
        public_ipv4=public_ipv4,
        devices=tuple(devices.get(member_id, ())),
        forwards=tuple(forwards.get(member_id, ())),
        openings=tuple(openings.get(member_id, ())),
        shaping=shaping,
        ipv6_prefixes=(prefix,) if prefix else (),
    )


def _rows(queryset: QuerySet[Any]) -> list[tuple[Any, ...]]:
    """The queryset's rows as plain tuples, straight from the driver, in (first column, id)
    order: no per-row ORM conversion (inet arrives as text; the snapshot parses it) and the
    snapshot's own order, so it has nothing to sort. Run inside the caller's transaction."""
    first = queryset.query.values_select[0]
    sql, params = queryset.order_by(first, "id").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def firewall_snapshot_build(*, host: FirewallHost, data: SnapshotData | None = None) -> rs.Snapshot:
    """The compiler's input for `host` (raises SnapshotError naming any inconsistent row)."""
    data = data or snapshot_data_read()
    buildings = set(host.site.buildings.values_list("pk", flat=True)) if host.site_id else set()
    members, private = data.for_buildings(buildings)
    return rs.Snapshot(
        policy=data.policy,
        host=rs.Host(
            name=host.name,
            uplink_interfaces=host.interface_names("uplink_interfaces"),
            member_interfaces=host.interface_names("member_interfaces"),
            management_interfaces=host.interface_names("management_interfaces"),
            fast_path=bool(host.site_id and host.site.fast_path),
            shaping_root=rs.ShapingRoot(host.shaping_root),
            tx_queues=host.tx_queues,
            link_kbit=host.link_kbit,
            private_networks=private,
            public_networks=data.public_networks,
        ),
        members=members,
        dhcp=_dhcp_build(host, data, members, buildings) if host.serves_dhcp else None,
        ha=_ha_build(host),
        resolver=resolver_build(
            host,
            data.dhcp if data.dhcp is not None else snapshot_dhcp_read(),
            private,
            _registration_ranges(data, buildings),
        ),
    )


def _registration_ranges(data: SnapshotData, buildings: set[int]) -> tuple[str, ...]:
    """The enabled registration ranges of the site's buildings (every one: no buildings)."""
    dhcp_read = data.dhcp if data.dhcp is not None else snapshot_dhcp_read()
    return tuple(
        net
        for b, net in sorted(dhcp_read.registration_by_building.items())
        if not buildings or b in buildings
    )


def _ha_build(host: FirewallHost) -> rs.Ha | None:
    """keepalived's and conntrackd's input for `host`, or None when it is not one of a pair.

    A pair is the two enabled hosts of a site with a sync link, when the site has virtual
    addresses. The IPv4 primary is the site's choice or the first host in rollout order, the
    IPv6 primary the site's choice or the second: the primary's instance gets priority 200,
    the other 100."""

    site = host.site
    if not host.sync_interface or not site.virtual_addresses.strip():
        return None
    pair = list(
        site.hosts.filter(enabled=True).exclude(sync_interface="").order_by("rollout_order", "name")
    )
    if host not in pair:
        return None
    if len(pair) != 2:
        raise rs.SnapshotError(
            f"site {site.name}: failover needs exactly two enabled hosts with a sync link, "
            f"found {len(pair)}"
        )
    peer = pair[1] if pair[0].pk == host.pk else pair[0]
    primary4 = site.ipv4_primary_id or pair[0].pk
    primary6 = site.ipv6_primary_id or pair[1].pk
    side = {
        "member": host.interface_names("member_interfaces")[0],
        "uplink": host.interface_names("uplink_interfaces")[0],
    }
    try:
        pairs = parse_virtual_addresses(site.virtual_addresses)
    except ValueError as exc:
        raise rs.SnapshotError(f"site {site.name}: virtual addresses: {exc}") from None
    v4 = tuple((side[s], a) for s, a in pairs if ipaddress.ip_interface(a).version == 4)
    v6 = tuple((side[s], a) for s, a in pairs if ipaddress.ip_interface(a).version == 6)
    return rs.Ha(
        sync_interface=host.sync_interface,
        local4=host.sync_address4,
        peer4=peer.sync_address4,
        local6=host.sync_address6 or None,
        peer6=peer.sync_address6 or None,
        priority4=200 if host.pk == primary4 else 100,
        priority6=200 if host.pk == primary6 else 100,
        addresses4=v4,
        addresses6=v6,
        vrid=site.vrrp_id,
        advert_ms=site.vrrp_advert_ms,
        preempt=site.vrrp_preempt,
        preempt_delay=site.vrrp_preempt_delay,
        track_interfaces=(
            *host.interface_names("member_interfaces"),
            *host.interface_names("uplink_interfaces"),
        ),
        ignore_addresses=(host.address, peer.address),
        run_dir=host.ha_run_dir,
        notify=host.ha_notify,
        conntrackd_config=host.conntrackd_config,
    )


def _dhcp_build(
    host: FirewallHost, data: SnapshotData, members: tuple[rs.Member, ...], buildings: set[int]
) -> rs.Dhcp:
    """Kea's input for `host`: every device of the site's networked members as a reservation,
    and this host's share of the site's registration ranges (the DHCP hosts of a site, in
    rollout order, take disjoint consecutive shares of each range)."""
    site = host.site
    dhcp_read = data.dhcp if data.dhcp is not None else snapshot_dhcp_read()
    peers = list(
        site.hosts.filter(serves_dhcp=True, enabled=True)
        .order_by("rollout_order", "name")
        .values_list("pk", flat=True)
    )
    index, count = (peers.index(host.pk), len(peers)) if host.pk in peers else (0, 1)
    ranges = _registration_ranges(data, buildings)
    pools = [share for net in ranges if (share := pool_share(net, index, count)) is not None]
    reservations_of = data.reservations_of
    # Each member's reservations are one cached tuple while the member is unchanged: comparing
    # these with the last build's is mostly identity checks.
    per_member = tuple(reservations_of.get(m.id, ()) for m in members)
    dns_servers = lease_dns_servers(host, dhcp_read)
    inputs = (
        site.member_network4,
        site.gateway4,
        dns_servers,
        dhcp_read.domain_name,
        dhcp_read.lease_seconds,
        dhcp_read.registration_lease_seconds,
        dhcp_read.captive_portal_url,
        tuple(pools),
        per_member,
        host.ra_pid_file,
        host.kea_control_socket,
        host.kea_lease_file,
        host.interface_names("dhcp_interfaces") if host.dhcp_interfaces else (),
    )
    # While no reservation, range or setting changes (a forward, an opening, a shaping change),
    # the host's last object is reused: no 60,000 addresses parsed and checked again, and the
    # compiler reuses its text (workers/ruleset/memo.py, by identity).
    last = PUSH_MEMO.dhcp.get(host.pk)
    if last is not None and last.inputs == inputs:
        return last.dhcp
    ids = tuple(m.id for m in members)
    if last is not None and last.inputs[:8] + last.inputs[9:] == inputs[:8] + inputs[9:]:
        # Only devices changed (a registration, a MAC, a move): the last object with the
        # changed members' rows swapped, only those checked (a full build: ~1 s at 20,000).
        with contextlib.suppress(rs.SnapshotError):  # the full build below names the row
            dhcp = _dhcp_devices_changed(last, ids, per_member)
            PUSH_MEMO.dhcp[host.pk] = DhcpBuilt(inputs, dhcp, ids)
            return dhcp
    dhcp = rs.Dhcp(
        network=site.member_network4,
        router=site.gateway4,
        dns_servers=dns_servers,
        domain=dhcp_read.domain_name,
        lease_seconds=dhcp_read.lease_seconds,
        registration_lease_seconds=dhcp_read.registration_lease_seconds,
        captive_portal=(
            rs.CaptivePortalUrl(dhcp_read.captive_portal_url)
            if dhcp_read.captive_portal_url
            else None
        ),
        pools=tuple(pools),
        reservations=tuple((mac, ipv4) for rows in per_member for mac, ipv4, _v6 in rows),
        ra_prefixes=tuple(
            (mac, _ra_prefix(ipv6)) for rows in per_member for mac, _v4, ipv6 in rows if ipv6
        ),
        ra_pid_file=host.ra_pid_file,
        control_socket=host.kea_control_socket,
        lease_file=host.kea_lease_file,
        interfaces=inputs[-1],
    )
    PUSH_MEMO.dhcp[host.pk] = DhcpBuilt(inputs, dhcp, ids)
    return dhcp


def _ra_prefix(ipv6: str) -> str:
    return f"{ipaddress.IPv6Network(f'{ipv6}/64', strict=False)}"


def _dhcp_devices_changed(
    last: DhcpBuilt,
    ids: tuple[int, ...],
    per_member: tuple[tuple[tuple[str, str, str | None], ...], ...],
) -> rs.Dhcp:
    """`last`'s Dhcp with the rows of the members whose reservations changed swapped (each
    member's rows are one cached tuple while it is unchanged: identity first)."""
    before = dict(zip(last.members, last.inputs[8], strict=True))
    now = dict(zip(ids, per_member, strict=True))
    gone: list[tuple[str, str, str | None]] = []
    new: list[tuple[str, str, str | None]] = []
    for mid, rows in now.items():
        old = before.pop(mid, ())
        if old is not rows and old != rows:
            gone.extend(old)
            new.extend(rows)
    for rows in before.values():  # members no longer networked
        gone.extend(rows)
    return last.dhcp.with_devices(
        removed=[(mac, v4) for mac, v4, _v6 in gone],
        added=[(mac, v4) for mac, v4, _v6 in new],
        ra_removed=[(mac, _ra_prefix(v6)) for mac, _v4, v6 in gone if v6],
        ra_added=[(mac, _ra_prefix(v6)) for mac, _v4, v6 in new if v6],
    )


def pool_share(network: str, index: int, count: int) -> tuple[str, str] | None:
    """Host `index` of `count`'s consecutive share of `network`'s usable addresses (without
    network and broadcast address), or None when the range is too small to share."""
    net = ipaddress.IPv4Network(network)
    first, last = int(net.network_address) + 1, int(net.broadcast_address) - 1
    size = (last - first + 1) // count
    if size < 1:
        return None
    lo = first + index * size
    hi = last if index == count - 1 else lo + size - 1
    return str(ipaddress.IPv4Address(lo)), str(ipaddress.IPv4Address(hi))
