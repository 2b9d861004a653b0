"""The pair's keepalived.conf and conntrackd.conf, generated from typed values only."""

from __future__ import annotations

import pytest

from workers.ruleset import Ha, Host, Policy, Snapshot, SnapshotError, compile_bundle
from workers.ruleset.ha import conntrackd_config, keepalived_config

VIP4 = (("dorm0", "10.100.0.1/16"), ("inet0", "203.0.113.1/24"))
VIP6 = (("dorm0", "2001:db8:100::1/48"), ("dorm0", "fe80::1/64"))


def ha(**kw) -> Ha:
    values = {
        "sync_interface": "sync0",
        "local4": "10.255.254.1",
        "peer4": "10.255.254.2",
        "local6": "fdff::1",
        "peer6": "fdff::2",
        "priority4": 200,
        "priority6": 100,
        "addresses4": VIP4,
        "addresses6": VIP6,
        "track_interfaces": ("dorm0", "inet0"),
        "ignore_addresses": ("10.255.255.11",),
    } | kw
    return Ha(**values)


def snapshot(h: Ha | None) -> Snapshot:
    host = Host(name="fw1", uplink_interfaces=("inet0",), member_interfaces=("dorm0",))
    return Snapshot(policy=Policy(), host=host, ha=h)


def instance(text: str, name: str) -> str:
    start = text.index(f"vrrp_instance {name} {{")
    return text[start : text.index("\n}\n", start)]


def test_keepalived_runs_vrrp3_with_sub_second_unicast_adverts_on_the_sync_link():
    text = keepalived_config(snapshot(ha()))
    assert "vrrp_version 3" in text
    v4, v6 = instance(text, "ipv4"), instance(text, "ipv6")
    assert "advert_int 0.1" in v4
    assert "interface sync0" in v4
    assert "unicast_src_ip 10.255.254.1" in v4
    assert "10.255.254.2" in v4
    assert "unicast_src_ip fdff::1" in v6
    assert "fdff::2" in v6
    assert "priority 200" in v4
    assert "priority 100" in v6
    assert "10.100.0.1/16 dev dorm0" in v4
    assert "203.0.113.1/24 dev inet0" in v4
    assert "2001:db8:100::1/48 dev dorm0" in v6
    assert "10.100.0.1" not in v6
    assert "preempt_delay 2" in v4
    assert 'notify "/usr/local/sbin/portal-ha notify /etc/conntrackd/conntrackd.conf' in v4
    assert 'file "/run/portal-ha/priority-ipv4"' in text


def test_nopreempt_and_a_single_family():
    text = keepalived_config(snapshot(ha(preempt=False, addresses6=(), local6=None, peer6=None)))
    assert "vrrp_instance ipv6" not in text
    assert "nopreempt" in instance(text, "ipv4")


def test_conntrackd_syncs_ftfw_over_udp_and_ignores_the_hosts_own_addresses():
    text = conntrackd_config(snapshot(ha()))
    assert "Mode FTFW" in text
    assert "StartupResync on" in text
    assert "IPv4_address 10.255.254.1" in text
    assert "IPv4_Destination_Address 10.255.254.2" in text
    assert "Interface sync0" in text
    for address in ("10.100.0.1", "203.0.113.1", "2001:db8:100::1", "10.255.255.11", "fdff::2"):
        assert f"_address {address}\n" in text
    assert "fe80::1" not in text


def test_no_pair_no_files_and_the_bundle_carries_both_when_paired():
    assert keepalived_config(snapshot(None)) is None
    assert conntrackd_config(snapshot(None)) is None
    paired = compile_bundle(snapshot(ha()))
    single = compile_bundle(snapshot(None))
    assert {"keepalived", "conntrackd"} <= set(paired.artefacts)
    assert "keepalived" not in single.artefacts
    assert paired.content_hash != single.content_hash


def test_the_snapshot_round_trips_through_json():
    snap = snapshot(ha())
    assert Snapshot.from_json(snap.to_json()) == snap
    assert '"ha"' not in snapshot(None).to_json()  # stored single-host snapshots unchanged


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"advert_ms": 15}, "multiple of 10 ms"),
        ({"advert_ms": 5}, "advert interval"),
        ({"peer4": "10.255.254.1"}, "this host's own"),
        ({"local6": None}, "IPv6 sync addresses"),
        ({"addresses4": (("dorm0", "2001:db8::1/64"),)}, "address family mismatch"),
        ({"addresses4": (("dorm0", "10.100.0.1"),)}, "prefix length"),
        ({"addresses4": (("dorm0;reboot", "10.100.0.1/16"),)}, "interface name"),
        ({"sync_interface": "sync0 }"}, "interface name"),
        ({"run_dir": "/run/x y"}, "safe characters"),
        ({"notify": '/usr/bin/x"; reboot'}, "safe characters"),
        ({"priority4": 255}, "priority"),
        ({"addresses4": (), "addresses6": ()}, "no virtual address"),
    ],
)
def test_bad_values_are_refused_with_a_reason(change, message):
    with pytest.raises(SnapshotError, match=message):
        ha(**change)
