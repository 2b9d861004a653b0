"""Devices changed on the delta path: `Dhcp.with_devices` (only the changed rows checked) gives
exactly the input a full build of the same rows gives, and Kea's and portal-ra's texts rendered
from it (lines kept from the last rendering) are byte for byte a fresh rendering's; bad rows
are refused, as the full build refuses them."""

from __future__ import annotations

import ipaddress
import json
import random

import pytest

from tests.unit.ruleset.builders import make_snapshot
from workers.ruleset import kea
from workers.ruleset import snapshot as s

NET = ipaddress.IPv4Network("10.100.0.0/16")
POOL = ("10.100.250.1", "10.100.250.127")


def full(rows: dict[str, tuple[str, str | None]]) -> s.Dhcp:
    return s.Dhcp(
        network=str(NET),
        router="10.100.0.1",
        pools=(POOL,),
        reservations=tuple((mac, ip) for mac, (ip, _p) in rows.items()),
        ra_prefixes=tuple((mac, p) for mac, (_ip, p) in rows.items() if p),
    )


def texts(d: s.Dhcp, *, fresh: bool) -> tuple[str, str]:
    snap = make_snapshot()
    snapshot = s.Snapshot(policy=snap.policy, host=snap.host, members=snap.members, dhcp=d)
    if fresh:  # nothing kept from an earlier rendering
        kea._KEA_ROWS.memo = {}
        kea._RA_ROWS.memo = {}
    return kea.kea_config(snapshot), kea.ra_config(snapshot)


def room(a: int, b: int) -> str:
    return str(ipaddress.IPv6Network(f"2001:db8:{a:x}:{b:x}::/64"))


def random_row(rng: random.Random, taken: set[str]) -> tuple[str, str, str | None]:
    while True:
        mac = "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
        ip = str(NET[rng.randrange(2, 60000)])
        if mac not in taken and ip not in taken:
            break
    room_ = rng.randrange(40)
    return mac, ip, (room(0, room_) if rng.random() < 0.8 else None)


@pytest.mark.parametrize("seed", range(8))
def test_devices_changed_step_by_step_equal_a_full_build_and_a_fresh_rendering(seed):
    rng = random.Random(seed)  # noqa: S311  (a seeded test sequence)
    rows: dict[str, tuple[str, str | None]] = {}
    used_ips: set[str] = set()
    for _ in range(300):
        mac, ip, prefix = random_row(rng, set(rows) | used_ips)
        if ip in used_ips:
            continue
        rows[mac] = (ip, prefix)
        used_ips.add(ip)
    current = full(rows)
    texts(current, fresh=True)
    for _step in range(40):
        removed, added = [], []
        for _ in range(rng.randrange(1, 4)):
            kind = rng.choice(("add", "remove", "mac", "address", "room"))
            if kind == "add" or not rows:
                mac, ip, prefix = random_row(rng, set(rows) | used_ips)
                if ip in used_ips or any(a[0] == mac for a in added):
                    continue
                rows[mac] = (ip, prefix)
                used_ips.add(ip)
                added.append((mac, ip, prefix))
                continue
            mac = rng.choice(sorted(rows))
            if any(a[0] == mac for a in added):
                continue
            ip, prefix = rows.pop(mac)
            removed.append((mac, ip, prefix))
            if kind == "remove":
                used_ips.discard(ip)
            elif kind == "mac":  # the device's MAC changed, its address stays
                new_mac = random_row(rng, set(rows) | {mac})[0]
                rows[new_mac] = (ip, prefix)
                added.append((new_mac, ip, prefix))
            elif kind == "address":  # an address freed by a removal goes to the next device
                rows[mac] = (ip, prefix)
                removed.pop()
                other = [m for m in rows if m != mac and all(a[0] != m for a in added)]
                if other:
                    victim = rng.choice(other)
                    vip, vprefix = rows.pop(victim)
                    removed.append((victim, vip, vprefix))
                    used_ips.discard(vip)
                    new_mac = random_row(rng, set(rows))[0]
                    rows[new_mac] = (vip, vprefix)
                    used_ips.add(vip)
                    added.append((new_mac, vip, vprefix))
            else:  # the member moved: another room's /64
                new_prefix = room(1, rng.randrange(40))
                rows[mac] = (ip, new_prefix)
                added.append((mac, ip, new_prefix))
        step = current.with_devices(
            removed=[(m, ip) for m, ip, _p in removed],
            added=[(m, ip) for m, ip, _p in added],
            ra_removed=[(m, p) for m, _ip, p in removed if p],
            ra_added=[(m, p) for m, _ip, p in added if p],
        )
        expected = full(rows)
        assert step == expected
        kept = texts(step, fresh=False)
        assert kept == texts(expected, fresh=True)
        # portal-ra's text is what json.dumps spells for the same configuration.
        ra = json.loads(kept[1])
        assert kept[1] == json.dumps(ra, indent=1, sort_keys=True) + "\n"
        assert ra["prefixes"] == {m: p for m, (_ip, p) in sorted(rows.items()) if p}
        texts(step, fresh=False)  # the memo now holds this step's lines
        current = step


def test_no_prefixes_spell_an_empty_object():
    d = full({"02:00:00:00:00:01": ("10.100.0.5", None)})
    ra = texts(d, fresh=True)[1]
    assert json.loads(ra)["prefixes"] == {}
    assert ra == json.dumps(json.loads(ra), indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    ("added", "message"),
    [
        ((("02:00:00:00:00:09", "10.100.0.5"),), "reserved twice"),  # the address of 01
        ((("02:00:00:00:00:01", "10.100.0.9"),), "reserved twice"),  # the MAC of 01
        ((("02:00:00:00:00:09", "10.100.250.5"),), "inside a pool"),
        ((("02:00:00:00:00:09", "10.101.0.5"),), "outside"),
        ((("02:00:00:00:00:09", "10.100.0.1"),), "outside"),  # the router
        ((("02:00:00:00:00:0G", "10.100.0.9"),), "MAC"),
        ((("02:00:00:00:00:09", "10.100.0.300"),), "reservation of"),
    ],
)
def test_a_bad_new_row_is_refused_as_the_full_build_refuses_it(added, message):
    d = full({"02:00:00:00:00:01": ("10.100.0.5", "2001:db8::/64")})
    with pytest.raises(s.SnapshotError, match=message):
        d.with_devices(added=added)
    with pytest.raises(s.SnapshotError):
        s.Dhcp(network=d.network, router=d.router, pools=d.pools,
               reservations=d.reservations + added)  # fmt: skip


def test_a_bad_prefix_or_a_row_it_does_not_hold_is_refused():
    d = full({"02:00:00:00:00:01": ("10.100.0.5", "2001:db8::/64")})
    with pytest.raises(s.SnapshotError, match="not an IPv6 /64"):
        d.with_devices(ra_added=(("02:00:00:00:00:02", "2001:db8::/56"),))
    with pytest.raises(s.SnapshotError, match="two rooms"):
        d.with_devices(ra_added=(("02:00:00:00:00:01", "2001:db8:1::/64"),))
    with pytest.raises(s.SnapshotError, match="not in the input"):
        d.with_devices(removed=(("02:00:00:00:00:01", "10.100.0.6"),))
    with pytest.raises(s.SnapshotError, match="not in the input"):
        d.with_devices(ra_removed=(("02:00:00:00:00:03", "2001:db8::/64"),))


def test_only_a_change_of_devices_is_the_same_but_devices():
    d = full({"02:00:00:00:00:01": ("10.100.0.5", "2001:db8::/64")})
    more = d.with_devices(added=(("02:00:00:00:00:02", "10.100.0.6"),))
    assert d.same_but_devices(more)
    other = s.Dhcp(network=d.network, router=d.router, pools=d.pools,
                   reservations=more.reservations, lease_seconds=7200)  # fmt: skip
    assert not d.same_but_devices(other)
