"""The set-based store (COPY into a staging table, one INSERT ... ON CONFLICT per table) keeps
exactly the figures of the per-key Python store it replaced: random readings of a pair of
hosts (new keys, growing counters, counters that start over, new epochs, keys nobody holds,
a /64 with one or several devices of a member, devices in a shared /64, a device removed: its
keys go to their last owner) give the same buckets
per member and device, the same last totals per key and the same outcome as the reference
below (the former implementation, kept here as the specification)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
from collections import defaultdict

import pytest

from apps.firewall.models import FirewallHost, Site
from apps.network.models import Device
from apps.traffic.models import TrafficBucket, TrafficCounter
from apps.traffic.selectors import member_traffic, top_talkers
from apps.traffic.services import ACCT_SETS, Row, hour_start, traffic_store
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 20, 14, 25, tzinfo=dt.UTC)


class Reference:
    """The former traffic_store, per key in Python, over dictionaries instead of tables."""

    def __init__(self) -> None:
        self.counters: dict[tuple[int, str, str], tuple[str, int, int]] = {}
        self.last_owner: dict[tuple[int, str, str], tuple[int, int] | None] = {}
        self.buckets: dict[tuple[int, int, int, dt.datetime], list[int]] = defaultdict(
            lambda: [0, 0, 0, 0]
        )

    @staticmethod
    def owners():
        by4, by6, nets = {}, {}, {}
        for device_id, member_id, ipv4, ipv6 in Device.objects.order_by("id").values_list(
            "id", "member_id", "ipv4", "ipv6"
        ):
            if ipv4:
                by4[str(ipv4)] = (member_id, device_id)
            if ipv6:
                address = ipaddress.IPv6Address(str(ipv6))
                by6[str(address)] = (member_id, device_id)
                prefix = int(address) >> 64
                held = nets.get(prefix)
                if held is None:
                    nets[prefix] = (member_id, device_id)
                elif held[0] == member_id and held[1] != device_id:
                    nets[prefix] = (member_id, 0)
        return by4, nets, by6

    def store(self, host, epoch, rows, now):
        by4, nets, by6 = self.owners()
        start = hour_start(now)
        changed = total = unattributed = 0
        for row in rows:
            before = self.counters.get((host.pk, row.set_name, row.key))
            if before is not None and before[0] == epoch and row.octets >= before[2]:
                d_packets, d_octets = max(row.packets - before[1], 0), row.octets - before[2]
            else:
                d_packets, d_octets = row.packets, row.octets
            if before is not None and before == (epoch, row.packets, row.octets):
                continue
            changed += 1
            self.counters[(host.pk, row.set_name, row.key)] = (epoch, row.packets, row.octets)
            direction, kind = ACCT_SETS[row.set_name]
            if kind == "4":
                owner = by4.get(row.key)
            elif kind == "net":
                owner = nets.get(int(ipaddress.IPv6Address(row.key)) >> 64)
            else:
                owner = by6.get(row.key)
            if owner is None:  # nobody holds it now: its last owner (issue 26)
                owner = self.last_owner.get((host.pk, row.set_name, row.key))
            self.last_owner[(host.pk, row.set_name, row.key)] = owner
            if not d_octets and not d_packets:
                continue
            total += d_octets
            if owner is None:
                unattributed += d_octets
                continue
            cell = self.buckets[(owner[0], owner[1], host.site_id, start)]
            if direction == "in":
                cell[0] += d_octets
                cell[2] += d_packets
            else:
                cell[1] += d_octets
                cell[3] += d_packets
        return changed, total, unattributed


def _net64(address) -> str:
    return str(ipaddress.IPv6Network(f"{address}/64", strict=False).network_address)


def _keys(devices):
    """Every accounting key the rule set would count for these devices, plus strangers."""
    keys = []
    for d in devices:
        keys += [("acct4_in", str(d.ipv4)), ("acct4_out", str(d.ipv4))]
        if d.ipv6:
            keys += [("acct6n_in", _net64(d.ipv6)), ("acct6n_out", _net64(d.ipv6))]
            keys += [("acct6_in", str(d.ipv6)), ("acct6_out", str(d.ipv6))]
    keys += [("acct4_out", "10.100.250.9"), ("acct6n_in", "2001:db8:ffff:1::")]
    keys += [("acct6_in", "2001:db8:ffff:2::9")]
    return sorted(set(keys))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_readings_give_the_figures_of_the_per_key_store(seed):
    rng = random.Random(seed)  # noqa: S311 - a reproducible test sequence
    site = Site.objects.create(name="pair")
    other = Site.objects.create(name="other")
    hosts = [
        FirewallHost.objects.create(name="nat1", address="10.255.255.11", site=site),
        FirewallHost.objects.create(name="nat2", address="10.255.255.12", site=site),
        FirewallHost.objects.create(name="far", address="10.255.255.13", site=other),
    ]
    members = [member_active() for _ in range(5)]
    devices = [device_add(m) for m in members for _ in range(rng.choice([1, 1, 2, 3]))]
    assert any(d.ipv6 for d in devices)
    keys = _keys(devices)
    reference = Reference()
    totals: dict[tuple[int, str, str], list[int]] = {}
    epochs = {h.pk: "e0" for h in hosts}
    now = NOW
    for step in range(12):
        now += dt.timedelta(minutes=rng.choice([5, 5, 40]))  # some readings in the next hour
        if step == 6:  # a device removed: its keys go on counting (carried) for its member
            devices.pop(rng.randrange(len(devices))).delete()
        host = rng.choice(hosts)
        if rng.random() < 0.1:  # the host rebooted: a new epoch, totals from zero
            epochs[host.pk] = f"e{step + 1}"
            for k in [k for k in totals if k[0] == host.pk]:
                del totals[k]
        rows = []
        for set_name, key in rng.sample(keys, rng.randint(1, len(keys))):
            cell = totals.setdefault((host.pk, set_name, key), [0, 0])
            roll = rng.random()
            if roll < 0.1:  # the element was removed and added again: its counter restarted
                cell[:] = [rng.randint(0, 3), rng.randint(0, 500)]
            elif roll < 0.8:
                grown = rng.randint(0, 5)
                cell[0] += grown
                cell[1] += grown * rng.randint(40, 1500)
            if roll > 0.95:  # fewer packets, same bytes (a counter read mid-update)
                cell[0] = max(cell[0] - 1, 0)
            if cell[0] or cell[1]:
                rows.append(Row(set_name, key, cell[0], cell[1]))
        rows.sort(key=lambda r: (r.set_name, r.key))
        got = traffic_store(host=host, epoch=epochs[host.pk], rows=rows, now=now)
        want = reference.store(host, epochs[host.pk], rows, now)
        assert (got.changed, got.octets, got.unattributed) == want, f"reading {step}"
        assert got.keys == len(rows)
    stored = {
        (b.member_id, b.device_id, b.site_id, b.start): [
            b.bytes_in, b.bytes_out, b.packets_in, b.packets_out,
        ]
        for b in TrafficBucket.objects.all()
    }  # fmt: skip
    assert stored == dict(reference.buckets)
    counters = {
        (c.host_id, c.set_name, c.key): (c.epoch, c.packets, c.octets)
        for c in TrafficCounter.objects.all()
    }
    assert counters == reference.counters
    # What the pages show (a member's month, the top talkers of an hour) follows from these.
    for member in members:
        month = member_traffic(member=member, days=30, now=now)["month"]
        want_in = sum(v[0] for k, v in reference.buckets.items() if k[0] == member.pk)
        want_out = sum(v[1] for k, v in reference.buckets.items() if k[0] == member.pk)
        assert month == {"bytes_in": want_in, "bytes_out": want_out}
    top = top_talkers(hour=NOW, site=site)
    assert top["members"] == len(
        {k[0] for k in reference.buckets if k[2] == site.pk and k[3] == hour_start(NOW)}
    )


def test_a_member_with_several_devices_in_one_network_is_counted_as_the_member():
    site = Site.objects.create(name="pair")
    nat1 = FirewallHost.objects.create(name="nat1", address="10.255.255.11", site=site)
    ann, bob = member_active(), member_active()
    laptop, phone = device_add(ann), device_add(ann)
    solo = device_add(bob)
    assert _net64(laptop.ipv6) == _net64(phone.ipv6)
    rows = [
        Row("acct6n_in", _net64(laptop.ipv6), 3, 3000),
        Row("acct6n_out", _net64(solo.ipv6), 1, 100),
        Row("acct4_in", str(phone.ipv4), 1, 60),
    ]
    traffic_store(host=nat1, epoch="e", rows=rows, now=NOW)
    got = {
        (b.member_id, b.device_id): (b.bytes_in, b.bytes_out) for b in TrafficBucket.objects.all()
    }
    assert got == {(ann.pk, 0): (3000, 0), (ann.pk, phone.pk): (60, 0), (bob.pk, solo.pk): (0, 100)}


def test_a_reading_with_a_key_twice_is_stored_once():
    site = Site.objects.create(name="pair")
    nat1 = FirewallHost.objects.create(name="nat1", address="10.255.255.11", site=site)
    ann = member_active()
    laptop = device_add(ann)
    row = Row("acct4_in", str(laptop.ipv4), 2, 2000)
    outcome = traffic_store(host=nat1, epoch="e", rows=[row, row], now=NOW)
    assert outcome.changed == 1
    assert TrafficBucket.objects.get().bytes_in == 2000


def _parse_with_ipaddress(data):
    """The former parse (ipaddress per key): the reference for the keys' canonical text."""
    rows, skipped = [], 0
    for name, items in data["sets"].items():
        kind = ACCT_SETS[name][1]
        for key, packets, octets in items:
            try:
                address = ipaddress.ip_address(key)
            except ValueError:
                skipped += 1
                continue
            if (address.version == 4) != (kind == "4") or (
                kind == "net" and int(address) & (2**64 - 1)
            ):
                skipped += 1
                continue
            rows.append(Row(name, str(address), packets, octets))
    return rows, skipped


def test_the_parse_writes_keys_as_the_former_parse_did():
    """Stored counters are found again after the upgrade: the same canonical key text."""
    from apps.traffic.services import traffic_reply_parse

    keys4 = [
        "10.1.2.3",
        "0.0.0.0",  # noqa: S104 - a key, not a bind
        "255.255.255.255",
        "10.01.2.3",
        "1.2.3",
        "2001:db8::1",
        "",
    ]
    keys6 = [
        "2001:db8:0:0:0:0:0:1", "2001:DB8::1", "2001:db8:0:1:0:0:0:0", "::", "::1",
        "2001:0db8:0000:0000:0001:0000:0000:0001", "fe80::1:0:0:0", "2001:db8::0:1:0:0:1",
        "10.1.2.3", "2001:db8::g", "::ffff:10.1.2.3",
    ]  # fmt: skip
    nets = ["2001:db8:100:1::", "2001:DB8:100:0001:0::", "2001:db8:100:1::5", "::"]
    data = {
        "epoch": "ab",
        "sets": {
            "acct4_in": [[k, 1, 2] for k in keys4],
            "acct6_out": [[k, 1, 2] for k in keys6],
            "acct6n_in": [[k, 1, 2] for k in nets],
        },
    }
    _epoch, rows, skipped = traffic_reply_parse(data)
    assert (rows, skipped) == _parse_with_ipaddress(data)
