"""portal_fw.probes and portal_fw.offload without root: which bundles need the flowtable, the
probe's text, the refusal, and the count of offloaded flows in a `conntrack -L` listing.
The probe against a real kernel: tests/e2e/lab/test_flowtable_probe.py (a kernel without
flowtables: refused) and tests/e2e/kernel_lab (Debian's kernel: the probe passes)."""

from __future__ import annotations

import pytest

from portal_fw import offload, probes
from portal_fw.common import HelperError
from tests.unit.ruleset.builders import make_snapshot
from workers.ruleset import compile_snapshot


@pytest.fixture(autouse=True)
def _forget_answers():
    probes._known.clear()
    probes.DETAIL.clear()
    yield
    probes._known.clear()
    probes.DETAIL.clear()


def test_only_a_rule_set_with_the_fast_path_needs_the_flowtable() -> None:
    on = compile_snapshot(make_snapshot(fast_path=True)).nft
    off = compile_snapshot(make_snapshot()).nft
    assert probes.NEEDS[probes.FLOWTABLE].search(on)
    assert not probes.NEEDS[probes.FLOWTABLE].search(off)
    assert not probes.NEEDS[probes.FLOWTABLE].search("add element inet portal_fw fwd_keys_tcp {}")
    assert probes.flowtable_devices(on) == ["pl-cfwd", "pl-cfwu"]
    assert probes.flowtable_devices(off) == []
    # A rule set that does not need it is never probed (a probe that would refuse it).
    probes._known[probes.FLOWTABLE] = False
    assert probes.missing(off) == []


def test_the_probe_names_an_interface_only_when_given_one() -> None:
    text = probes.flowtable_probe_text("eth0")
    assert 'devices = { "eth0" }' in text
    assert "hook ingress priority filter" in text
    assert text.startswith("table inet portal_probe {")
    assert "devices" not in probes.flowtable_probe_text(None)
    assert probes.interface_exists("lo")
    assert not probes.interface_exists("pl-no-such-if")


def test_a_bundle_needing_a_missing_flowtable_is_refused_with_what_to_do(monkeypatch) -> None:
    asked: list[str] = []

    def kernel_without_flowtables(text: str) -> bool:
        asked.append(text)
        probes.DETAIL[probes.FLOWTABLE] = "Error: Could not process rule: No such file or directory"
        return False

    monkeypatch.setitem(probes.PROBES, probes.FLOWTABLE, kernel_without_flowtables)
    on = compile_snapshot(make_snapshot(fast_path=True)).nft
    with pytest.raises(HelperError) as refused:
        probes.check(on)
    error = refused.value.answer()
    assert error["message"] == (
        "this host's kernel has no flowtable support (CONFIG_NF_FLOW_TABLE): "
        "turn off the site's fast path"
    )
    assert error["missing"] == ["flowtable"]
    assert error["artefact"] == "nft"
    assert "No such file or directory" in error["detail"]
    # A refusal is asked again next time (a module may have been installed meanwhile) ...
    with pytest.raises(HelperError):
        probes.check(on)
    assert len(asked) == 2
    # ... a kernel that has it keeps that answer for the agent's life.
    monkeypatch.setitem(probes.PROBES, probes.FLOWTABLE, lambda text: asked.append(text) or True)
    probes.check(on)
    probes.check(on)
    assert len(asked) == 3
    assert probes.report() == {"flowtable": True}


def test_the_portal_translates_the_agents_refusal_word_for_word() -> None:
    """apps/firewall/reasons.py lists the agent's sentences for translation: they must stay the
    agent's own."""
    from pathlib import Path

    reasons = Path(__file__).resolve().parents[3] / "apps" / "firewall" / "reasons.py"
    text = " ".join(reasons.read_text().split())
    for sentence in probes.REFUSALS.values():
        head, tail = sentence.split(": ", 1)
        assert f'"{head}: "' in text
        assert f'"{tail}"' in text


# Lines of `conntrack -L` from the kernel lab (Debian 12's kernel): two offloaded flows, one
# on the slow path, one IPv6.
LISTING = """\
tcp      6 src=203.0.113.10 dst=198.51.100.5 sport=42150 dport=8080 packets=2991 bytes=158127537 src=10.100.0.10 dst=203.0.113.10 sport=80 dport=42150 packets=2155 bytes=112284 [OFFLOAD] mark=0 use=2
tcp      6 431999 ESTABLISHED src=10.100.0.20 dst=203.0.113.10 sport=40000 dport=5201 packets=12 bytes=900 src=203.0.113.10 dst=198.51.100.6 sport=5201 dport=40000 packets=10 bytes=700 [ASSURED] mark=0 use=1
tcp      6 src=2001:db8:100:1::10 dst=2001:db8:ffff::10 sport=40002 dport=5201 packets=9 bytes=642 src=2001:db8:ffff::10 dst=2001:db8:100:1::10 sport=5201 dport=40002 packets=7 bytes=376 [OFFLOAD] mark=0 use=2
"""


def test_offloaded_flows_are_counted_from_the_listing() -> None:
    assert offload.count_offloaded(LISTING) == 2
    assert offload.count_offloaded("") == 0


def test_no_flowtable_module_no_offloaded_flow_and_no_question(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(offload, "FLOWTABLE_MODULE", tmp_path / "nf_flow_table")
    monkeypatch.setattr(offload, "run", None)  # asking conntrack would fail the test
    assert offload.offloaded() == 0
