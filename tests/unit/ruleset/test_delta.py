"""Delta compile == full compile: random member changes applied as increments on top of a
full compile leave exactly the element sets and HTB classes of a fresh full compile, and the
increment is the very text `diff` gives between the two full compiles (no root needed; the
kernel version is tests/e2e/ruleset/test_delta_kernel.py)."""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import re
from collections.abc import Sequence

import pytest

from tests.unit.ruleset.changes import Site
from workers.ruleset import build, diff_rulesets, kea
from workers.ruleset import snapshot as s
from workers.ruleset.delta import DeltaBase, NotExpressible, content_digest, delta_step
from workers.ruleset.ir import ELEMENT_SEP, Ruleset
from workers.ruleset.memo import MEMO
from workers.ruleset.render import render_tc

HOST = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    link_kbit=1_000_000,
    private_networks=("10.100.0.0/16",),
    public_networks=("198.51.100.0/24",),
)
MQ_FAST = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    shaping_root="mq",
    tx_queues=4,
    fast_path=True,
)
POLICY = s.Policy(syn_proxy=True)
_LINE = re.compile(r"(add|delete) element (\S+ \S+) (\S+) \{ (.*) \}$")


def _model(ruleset: Ruleset) -> tuple[dict[str, set[str]], dict[str, dict[str, str]]]:
    """Element sets by set name and class lines by device and classid."""
    sets = {st.name: set(st.elements) for t in ruleset.tables for st in t.sets}
    classes: dict[str, dict[str, str]] = {}
    for line in render_tc(ruleset).splitlines():
        if line.startswith("class replace") and " parent " in line:
            words = line.split()
            classes.setdefault(words[3], {})[words[words.index("classid") + 1]] = line
    return sets, classes


def _apply(model: tuple[dict[str, set[str]], dict[str, dict[str, str]]], nft: str, tc: str) -> None:
    """Apply an increment's text to the model, as nft and tc would."""
    sets, classes = model
    for line in nft.splitlines():
        if line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match, line
        verb, _table, name, items = match.groups()
        elements = items.split(", ")
        if verb == "add":
            assert not (sets[name] & set(elements)), f"{name}: added twice"
            sets[name] |= set(elements)
        else:
            keys = set(elements)
            held = {e for e in sets[name] if e.split(ELEMENT_SEP, 1)[0] in keys}
            assert len(held) == len(keys), f"{name}: deleting what is not there"
            sets[name] -= held
    for line in tc.splitlines():
        words = line.split()
        dev, classid = words[3], words[words.index("classid") + 1]
        if words[1] == "del":
            del classes[dev][classid]
        else:
            classes.setdefault(dev, {})[classid] = line


def run_sequence(
    seed: int,
    host: s.Host,
    steps: int,
    members: int = 12,
    ids: Sequence[int] = range(1, 400),
    policy: s.Policy = POLICY,
) -> dict[str, int]:
    """Apply `steps` random changes both ways and compare after each; outcome counts."""
    rng = random.Random(seed)  # noqa: S311  (a seeded test sequence)
    site = Site(rng, members, ids)
    MEMO.clear()
    snap = site.snapshot(policy, host)
    full = build(snap)
    base = DeltaBase.from_ruleset(snap, full)
    model = _model(full)
    outcome = {"delta": 0, "full": 0, "flips": 0}
    for _ in range(steps):
        changed = site.step(rng)
        snap = site.snapshot(policy, host)
        fresh = build(snap)
        try:
            step = delta_step(base, changed)
        except NotExpressible:
            outcome["full"] += 1  # the pipeline compiles in full and starts a new base
            base = DeltaBase.from_ruleset(snap, fresh)
            model = _model(fresh)
            full = fresh
            continue
        outcome["delta"] += 1
        outcome["flips"] += base.recompiled > len(changed)
        expected = diff_rulesets(full, fresh, "a", "b")
        assert expected is not None, "diff needs a full replacement where the delta did not"
        assert step.nft.split("\n", 1)[1] == expected.nft.split("\n", 1)[1]
        assert step.tc == expected.tc
        assert (step.added, step.deleted, step.classes_changed) == (
            expected.added,
            expected.deleted,
            expected.classes_changed,
        )
        _apply(model, step.nft, step.tc)
        assert model == _model(fresh)
        assert base.digest == content_digest(fresh) == step.new_hash
        full = fresh
    return outcome


@pytest.mark.parametrize("seed", range(12))
def test_increments_equal_a_fresh_full_compile(seed: int) -> None:
    outcome = run_sequence(seed, HOST, steps=60)
    assert outcome["delta"] >= 50  # without the fast path nearly every change is a delta


@pytest.mark.parametrize("seed", range(3))
def test_without_the_syn_proxy_and_with_quotas(seed: int) -> None:
    policy = s.Policy(syn_proxy=False, conntrack_quota_out=200, conntrack_quota_in=100)
    outcome = run_sequence(300 + seed, HOST, steps=40, policy=policy)
    assert outcome["delta"] == 40


def test_flipped_shared_prefixes_are_exercised() -> None:
    flips = sum(run_sequence(seed, HOST, steps=60)["flips"] for seed in range(12))
    assert flips > 0


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_and_mq_hosts_fall_back_or_match(seed: int) -> None:
    outcome = run_sequence(100 + seed, MQ_FAST, steps=40)
    assert outcome["full"] > 0
    assert outcome["delta"] > 0


@pytest.mark.parametrize("seed", range(4))
def test_members_beyond_the_htb_minor_space_keep_their_probed_class(seed: int) -> None:
    # Ids around 0xffe0 wrap: a wrapped member's minor depends on the others (probing), so
    # only a change of who is shaped needs the full compile; every other change is a delta.
    ids = [*range(1, 40), *range(65505, 65545)]  # 65505 + k wraps onto the slot of k + 1
    outcome = run_sequence(200 + seed, HOST, steps=40, members=40, ids=ids)
    assert outcome["delta"] > 0


def test_digest_does_not_depend_on_order_and_sees_every_element() -> None:
    rng = random.Random(7)  # noqa: S311
    site = Site(rng, 10)
    ruleset = build(site.snapshot(POLICY, HOST))

    def flipped(table):
        return type(table)(
            table.family,
            table.name,
            tuple(
                type(st)(
                    st.name,
                    st.key_type,
                    st.value_type,
                    st.flags,
                    tuple(reversed(st.elements)),
                    st.size,
                    st.extra,
                )
                for st in table.sets
            ),
            table.chains,
            table.flowtables,
        )

    # Every table (inet portal_fw and ip portal_nat), each set's elements in reverse order.
    assert len(ruleset.tables) == 2
    reordered = Ruleset(ruleset.host, tuple(flipped(t) for t in ruleset.tables), ruleset.shapers)
    assert content_digest(reordered) == content_digest(ruleset)
    changed = site.step(rng)
    assert changed
    assert content_digest(build(site.snapshot(POLICY, HOST))) != content_digest(ruleset)


def test_a_set_that_would_change_its_size_needs_the_full_compile() -> None:
    # capacity(819) = 1024, capacity(820) = 2048: the 820th device of nopub4 changes the size.
    devices = tuple(s.Device(id=k + 1, ipv4=f"10.100.{k // 250}.{k % 250 + 1}") for k in range(819))
    members = (s.Member(id=1, devices=devices), s.Member(id=2))
    snap = s.Snapshot(policy=POLICY, host=HOST, members=members)
    base = DeltaBase.from_ruleset(snap, build(snap))
    digest = base.digest
    grown = s.Member(id=2, devices=(s.Device(id=5000, ipv4="10.100.9.9"),))
    with pytest.raises(NotExpressible, match="nopub4 changes its size"):
        delta_step(base, {2: grown})
    assert base.digest == digest  # nothing changed


def test_a_clash_with_another_member_is_refused_and_changes_nothing() -> None:
    members = (
        s.Member(id=1, devices=(s.Device(id=1, ipv4="10.100.0.1"),)),
        s.Member(id=2, devices=(s.Device(id=2, ipv4="10.100.0.2"),)),
    )
    snap = s.Snapshot(policy=POLICY, host=HOST, members=members)
    base = DeltaBase.from_ruleset(snap, build(snap))
    digest = base.digest
    clash = s.Member(id=2, devices=(s.Device(id=2, ipv4="10.100.0.1"),))
    with pytest.raises(s.SnapshotError, match=r"10\.100\.0\.1 is also device #1"):
        delta_step(base, {2: clash})
    assert base.digest == digest
    fine = s.Member(id=2, devices=(s.Device(id=2, ipv4="10.100.0.3"),))
    step = delta_step(base, {2: fine})  # the owners were given back: the next step works
    assert (step.added, step.deleted) == (1, 1)


@pytest.mark.parametrize("seed", range(3))
def test_mq_hosts_with_many_queues_match_the_full_compiles_majors(seed: int) -> None:
    # From 12 queues on, the majors skip the kernel's qdisc-hash bucket of handle 0
    # (shaping.queue_majors): the increment's classes and priorities must name the same ones.
    host = dataclasses.replace(MQ_FAST, tx_queues=32, fast_path=False)
    outcome = run_sequence(400 + seed, host, steps=40)
    assert outcome["delta"] > 0


def _dhcp_rows(m: s.Member, macs: dict[int, str]) -> tuple[tuple[str, str, str | None], ...]:
    """A member's reservation rows as the database gives them (MAC, IPv4, first IPv6)."""
    return tuple(
        (macs[d.id], str(d.ipv4), str(d.ipv6[0]) if d.ipv6 else None)
        for d in m.devices
        if d.ipv4 is not None
    )


def _dhcp_full(rows: dict[int, tuple[tuple[str, str, str | None], ...]]) -> s.Dhcp:
    flat = [r for mid in sorted(rows) for r in rows[mid]]
    return s.Dhcp(
        network="10.100.0.0/16",
        router="10.100.255.254",
        reservations=tuple((mac, v4) for mac, v4, _v6 in flat),
        ra_prefixes=tuple(
            (mac, str(ipaddress.IPv6Network(f"{v6}/64", strict=False)))
            for mac, _v4, v6 in flat
            if v6
        ),
    )


@pytest.mark.parametrize("seed", range(6))
def test_devices_changed_step_keas_and_portal_ras_files_as_a_full_compile(seed: int) -> None:
    """A device registered, removed, moved or given a new MAC is a delta step for the rule set
    and, for DHCP, a step of the last `Dhcp` (only the changed members' rows, as the portal's
    worker does it: apps/firewall/snapshot.py `_dhcp_devices_changed`): after every step Kea's
    and portal-ra's texts equal a fresh full compile's, and the rule set's increment is
    `diff`'s."""
    rng = random.Random(seed)  # noqa: S311  (a seeded test sequence)
    site = Site(rng, 14)
    MEMO.clear()
    macs: dict[int, str] = {}

    def mac_of(device_id: int) -> str:
        if device_id not in macs:
            macs[device_id] = "02:" + ":".join(f"{b:02x}" for b in device_id.to_bytes(5, "big"))
        return macs[device_id]

    def rows_now() -> dict[int, tuple[tuple[str, str, str | None], ...]]:
        for m in site.members.values():
            for d in m.devices:
                mac_of(d.id)
        return {mid: _dhcp_rows(m, macs) for mid, m in site.members.items()}

    def snapshot(d: s.Dhcp) -> s.Snapshot:
        return dataclasses.replace(site.snapshot(POLICY, HOST), dhcp=d)

    rows = rows_now()
    dhcp = _dhcp_full(rows)
    snap = snapshot(dhcp)
    full = build(snap)
    base = DeltaBase.from_ruleset(snap, full)
    steps = mac_only = 0
    for _ in range(40):
        changed = dict(site.step(rng))
        if rng.random() < 0.3:  # a device of some member gets a new MAC (its row changes)
            bare = [m for m in site.members.values()
                    if any(d.ipv4 is not None and not d.ipv6 for d in m.devices)]  # fmt: skip
            if bare and rng.random() < 0.5:  # half of them: a device without IPv6
                m = rng.choice(sorted(bare, key=lambda x: x.id))
                d = rng.choice([d for d in m.devices if d.ipv4 is not None and not d.ipv6])
            else:
                m = site.members[rng.choice(sorted(site.members))]
                d = rng.choice(m.devices) if m.devices else None
            if d is not None:
                macs[d.id] = "02:ff:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(4))
                changed.setdefault(m.id, m)
                # Without IPv6 only Kea's reservation changes: the member's value is the same.
                mac_only += int(d.ipv4 is not None and not d.ipv6)
        new_rows = rows_now()
        gone = [r for mid in changed for r in rows.get(mid, ()) if new_rows.get(mid) != rows[mid]]
        added = [
            r for mid in changed for r in new_rows.get(mid, ()) if new_rows[mid] != rows.get(mid)
        ]
        dhcp = dhcp.with_devices(
            removed=[(mac, v4) for mac, v4, _v6 in gone],
            added=[(mac, v4) for mac, v4, _v6 in added],
            ra_removed=[(mac, str(ipaddress.IPv6Network(f"{v6}/64", strict=False)))
                        for mac, _v4, v6 in gone if v6],
            ra_added=[(mac, str(ipaddress.IPv6Network(f"{v6}/64", strict=False)))
                      for mac, _v4, v6 in added if v6],
        )  # fmt: skip
        rows = new_rows
        stepped = snapshot(dhcp)
        expected_dhcp = _dhcp_full(rows)
        assert dhcp == expected_dhcp
        fresh_snap = snapshot(expected_dhcp)
        fresh = build(fresh_snap)
        kept = (kea.kea_config(stepped), kea.ra_config(stepped))
        kea._KEA_ROWS.memo, kea._RA_ROWS.memo = {}, {}  # a fresh rendering, nothing kept
        assert kept == (kea.kea_config(fresh_snap), kea.ra_config(fresh_snap))
        try:
            step = delta_step(base, {mid: site.members.get(mid) for mid in changed})
        except NotExpressible:
            base = DeltaBase.from_ruleset(fresh_snap, fresh)
            full = fresh
            continue
        steps += 1
        expected = diff_rulesets(full, fresh, "a", "b")
        assert expected is not None
        assert step.nft.split("\n", 1)[1] == expected.nft.split("\n", 1)[1]
        assert base.digest == content_digest(fresh)
        full = fresh
    assert steps >= 30
    assert mac_only > 0  # MAC changes of devices without IPv6 were among the steps
