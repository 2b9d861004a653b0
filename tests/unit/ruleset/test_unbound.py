"""The `unbound` artefact: the members' resolver, compiled from typed values only."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from workers.ruleset import Host, Policy, Snapshot, SnapshotError, compile_bundle
from workers.ruleset.host import Resolver
from workers.ruleset.unbound import unbound_config

HOST = Host(name="fw", uplink_interfaces=("inet0",), member_interfaces=("dorm0",))


def resolver(**kw) -> Resolver:
    values = {
        "listen": ("10.100.0.2",),
        "allow": ("10.100.0.0/16", "10.100.250.0/24"),
        "ratelimit": 200,
        "forwarders": ("203.0.113.53",),
        "local_name": "portal.dorm.example.org",
        "local_addresses": ("203.0.113.80",),
        "control_socket": "/run/unbound.ctl",
        "pid_file": "/run/unbound.pid",
        "username": "",
    }
    values.update(kw)
    return Resolver(**values)


def snapshot(r: Resolver | None) -> Snapshot:
    return Snapshot(policy=Policy(), host=HOST, resolver=r)


def test_the_resolver_listens_on_its_address_serves_members_only_and_limits_each_client():
    text = unbound_config(snapshot(resolver()))
    assert "    interface: 10.100.0.2\n" in text
    assert "interface-automatic: no" in text
    # Everything refused first, then the member networks allowed (longest match wins).
    assert "access-control: 0.0.0.0/0 refuse" in text
    assert "access-control: ::0/0 refuse" in text
    assert "access-control: 10.100.0.0/16 allow" in text
    assert "access-control: 10.100.250.0/24 allow" in text
    assert "ip-ratelimit: 200" in text
    assert 'local-zone: "portal.dorm.example.org." static' in text
    assert 'local-data: "portal.dorm.example.org. 300 IN A 203.0.113.80"' in text
    assert 'forward-zone:\n    name: "."\n    forward-addr: 203.0.113.53\n' in text
    assert 'module-config: "iterator"' in text
    assert 'control-interface: "/run/unbound.ctl"' in text


def test_without_forwarders_it_recurses_from_the_root_and_validates():
    text = unbound_config(snapshot(resolver(forwarders=())))
    assert "forward-zone" not in text
    assert 'module-config: "validator iterator"' in text
    assert 'auto-trust-anchor-file: "/var/lib/unbound/root.key"' in text


def test_no_resolver_no_artefact_and_the_bundle_carries_it_when_there_is_one():
    assert "unbound" not in compile_bundle(snapshot(None)).artefacts
    bundle = compile_bundle(snapshot(resolver()))
    assert bundle.artefacts["unbound"] == unbound_config(snapshot(resolver()))
    assert bundle.content_hash != compile_bundle(snapshot(resolver(ratelimit=300))).content_hash


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("listen", (), "no listening address"),
        ("listen", ("10.100.0.2\nserver:",), "10.100.0.2"),
        ("allow", (), "no member network"),
        ("allow", ("0.0.0.0/0 allow\naccess-control: ::/0",), "member networks"),
        ("ratelimit", -1, "queries per second"),
        ("local_name", 'portal.example.org." static\nlocal-data: "x', "not a domain name"),
        ("local_name", "Portal.Example.org", "not a domain name"),
        ("local_addresses", (), "has no address"),
        ("control_socket", "/run/x\ninclude: /etc/shadow", "control socket"),
        ("username", "root; rm", "not a user name"),
    ],
)
def test_bad_values_are_refused_with_a_message_naming_them(field, value, message):
    with pytest.raises(SnapshotError, match=message):
        resolver(**{field: value})


def test_the_resolver_is_part_of_the_stored_snapshot_and_old_ones_stay_equal():
    with_resolver = snapshot(resolver())
    back = Snapshot.from_json(with_resolver.to_json())
    assert back == with_resolver
    assert compile_bundle(back).content_hash == compile_bundle(with_resolver).content_hash
    assert '"resolver"' not in snapshot(None).to_json()
    with pytest.raises(SnapshotError, match="resolver"):
        Snapshot(policy=Policy(), host=HOST, resolver="interface: 0.0.0.0")


@pytest.mark.skipif(shutil.which("unbound-checkconf") is None, reason="needs Debian's unbound")
@pytest.mark.parametrize("forwarders", [("203.0.113.53",), ()])
def test_unbound_checkconf_accepts_the_text(forwarders):
    text = unbound_config(snapshot(resolver(forwarders=forwarders, username="")))
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "unbound.conf"
        conf.write_text(text)
        done = subprocess.run(
            ["unbound-checkconf", str(conf)], capture_output=True, text=True, timeout=30
        )
    if not forwarders and not Path("/var/lib/unbound/root.key").exists():
        # Debian's unbound unit creates the root trust anchor (unbound-anchor) at its start: a
        # host without it refuses the recursing configuration, naming the file.
        assert done.returncode != 0
        assert "root.key" in done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
