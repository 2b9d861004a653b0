"""The walled garden's captive-portal rules: HTTP to the portal's proxy, the rest refused at once."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.unit.ruleset.builders import HOST, POLICY, make_small_members
from tests.unit.ruleset.test_ruleset_compile import check_golden
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

PORTAL = "203.0.113.80"


def policy(**kw) -> s.Policy:
    fields = {f: getattr(POLICY, f) for f in POLICY.__dataclass_fields__}
    fields.update(
        registration_networks=("10.100.250.0/24",),
        portal_addresses=(PORTAL,),
        dns_servers=("203.0.113.53",),
    )
    fields.update(kw)
    return s.Policy(**fields)  # type: ignore[arg-type]


def snapshot(p: s.Policy) -> s.Snapshot:
    return s.Snapshot(policy=p, host=HOST, members=make_small_members())


def chain(text: str, name: str) -> str:
    start = text.index(f"chain {name} {{")
    return text[start : text.index("\n\t}", start)]


def test_golden_small_captive_nft() -> None:
    check_golden("small_captive.nft", compile_snapshot(snapshot(policy(captive_proxy=PORTAL))).nft)


def test_a_walled_device_is_refused_at_once_not_dropped() -> None:
    walled = chain(compile_snapshot(snapshot(policy())).nft, "walled")
    assert "reject with tcp reset" in walled
    assert "reject with icmp admin-prohibited" in walled or "icmp type admin-prohibited" in walled
    assert " drop" not in walled
    # The portal and the site's resolvers stay reachable, ahead of the refusals.
    assert walled.index("@walled4 tcp dport { 80, 443 } goto out_pass") < walled.index("reject")
    assert walled.index("@dns4 meta l4proto { tcp, udp } th dport 53 goto out_pass") < walled.index(
        "reject"
    )


def test_walled_http_goes_to_the_portal_proxy_only_when_one_is_set() -> None:
    with_proxy = chain(compile_snapshot(snapshot(policy(captive_proxy=PORTAL))).nft, "dstnat")
    rule = f'tcp dport 80 iifname "pl-cfwd" ip saddr @reg4 ip daddr != @walled4 dnat ip to {PORTAL}'
    assert rule in with_proxy
    # Before the early exit of everything not from the uplink, which member traffic is.
    assert with_proxy.index(rule) < with_proxy.index('iifname != "pl-cfwu" accept')
    without = chain(compile_snapshot(snapshot(policy())).nft, "dstnat")
    assert "@reg4" not in without


def test_a_proxy_that_is_no_portal_address_is_refused() -> None:
    with pytest.raises(s.SnapshotError, match="not one of the portal addresses"):
        policy(captive_proxy="203.0.113.99")
    with pytest.raises(s.SnapshotError, match="captive proxy"):
        policy(captive_proxy='1.2.3.4" accept')


def test_the_proxy_survives_the_json_round_trip() -> None:
    snap = snapshot(policy(captive_proxy=PORTAL))
    again = s.Snapshot.from_json(snap.to_json())
    assert again == snap
    assert str(again.policy.captive_proxy) == PORTAL


def test_real_nft_accepts_the_captive_rules(tmp_path) -> None:
    """`nft -c` in a network namespace of its own (unshare -n): checks, touches nothing."""
    nft = shutil.which("nft", path="/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
    assert nft, "nft is installed by make test"
    assert shutil.which("unshare")
    path = tmp_path / "captive.nft"
    path.write_text(compile_snapshot(snapshot(policy(captive_proxy=PORTAL))).nft)
    # Without root, a user namespace of its own maps the caller to root inside (-r).
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]
    result = subprocess.run(
        [*unshare, nft, "-c", "-f", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
