"""Compiled rule sets for the push and health tests in the lab (Django side)."""

from __future__ import annotations

from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.versions import ruleset_version_store
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s


def compiled_for(host: str, port: int, *, shaped: bool = False, fast_path: bool = False):
    member = s.Member(
        id=1,
        public_ipv4="198.51.100.23",
        devices=(s.Device(id=10, ipv4="10.100.1.23", ipv6=("2001:db8:100:1::23",)),),
        forwards=(s.PortForward(1, "tcp", port, 10, 80),),
        shaping=s.Shaping(4000, 1000) if shaped else None,
    )
    snapshot = s.Snapshot(
        policy=s.Policy(management_networks=("10.255.255.0/28",)),
        host=s.Host(
            name=host,
            uplink_interfaces=("inet0",),
            member_interfaces=("dorm0",),
            private_networks=("10.100.0.0/16",),
            public_networks=("198.51.100.0/24",),
            fast_path=fast_path,
        ),
        members=(member,),
    )
    return compile_snapshot(snapshot)


def version(
    host: FirewallHost,
    *,
    port: int = 8080,
    nft_text: str | None = None,
    shaped: bool = False,
    fast_path: bool = False,
) -> RuleSetVersion:
    compiled = compiled_for(host.name, port, shaped=shaped, fast_path=fast_path)
    return ruleset_version_store(
        host=host,
        nft_text=nft_text if nft_text is not None else compiled.nft,
        tc_text=compiled.tc,
        content_hash=compiled.content_hash if nft_text is None else "f" * 64,
        counts=compiled.counts,
        compile_seconds=0.0,
        cause="test",
    )
