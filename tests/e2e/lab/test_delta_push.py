"""The delta path in the site run (PORTAL_FIREWALL_DELTA), on the lab firewalls: a member-only
change steps each host's delta base and pushes the increment without a full compile, and the
host ends up with exactly what a full push of a full compile gives; a policy change compiles
in full; a refused increment falls back to the full compile, and the next change is a delta
again."""

from __future__ import annotations

import dataclasses

import pytest

from apps.firewall import compiled as compiled_module
from apps.firewall.memo import PUSH_MEMO
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion, Site
from apps.firewall.push import Push
from apps.firewall.rollout import site_sync
from apps.network.models import BlockedPort
from tests.factories import device_add, forward_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db]


def run(site: Site, cause: str) -> dict[str, float]:
    timings: dict[str, float] = {}
    outcomes = site_sync(site=site, cause=cause, timings=timings)
    assert [o.ok for o in outcomes] == [True, True], outcomes
    return timings


def paths(timings: dict[str, float]) -> dict[str, set[str]]:
    """Which hosts took the delta path and which compiled in full, by the run's timings."""
    return {
        kind: {k.split(" ", 1)[1] for k in timings if k.startswith(kind + " ")}
        for kind in ("delta", "compile")
    }


@pytest.fixture
def delta_on(settings, hosts, firewall_redis_clean):
    settings.PORTAL_FIREWALL_DELTA = True
    PUSH_MEMO.clear()
    yield Site.objects.get(pk=hosts[0].site_id)
    PUSH_MEMO.clear()


def test_a_forward_takes_the_delta_path_and_lands_as_a_full_compile_would(
    delta_on, hosts, monkeypatch
):
    site = delta_on
    member = member_active()
    device = device_add(member, "console")
    first = paths(run(site, "device.add"))
    assert first == {"delta": set(), "compile": {"pl-nat1", "pl-nat2"}}  # no base yet

    forward_add(member, device, ports="8080")
    timings = run(site, f"port_forward.create {member.pk}")
    assert paths(timings) == {"delta": {"pl-nat1", "pl-nat2"}, "compile": set()}, timings
    for host in FirewallHost.objects.filter(pk__in=[h.pk for h in hosts]):
        version = host.applied_version
        assert version.content_hash == host.applied_checksum
        # Pushed as an increment; its texts are rendered by the next full compile.
        assert version.texts_pending
    after_delta = {
        h.name: h.confirmed_digest["total"] for h in FirewallHost.objects.filter(site=site)
    }
    delta_ids = {h.name: h.applied_checksum for h in FirewallHost.objects.filter(site=site)}

    # The same database compiled in full and pushed in full (no increment: nothing confirmed)
    # names the same version and leaves the same content in the kernel.
    for host in FirewallHost.objects.filter(site=site):
        host.mark_pending()
    # Not "it runs that already" (kea-start's check before a full push): push in full.
    monkeypatch.setattr(Push, "runs_already", lambda self, session: None)
    timings = run(site, "reconcile (health check)")
    assert paths(timings)["delta"] == set()
    for host in FirewallHost.objects.filter(site=site):
        assert host.applied_checksum == delta_ids[host.name]
        assert host.confirmed_digest["total"] == after_delta[host.name]
        assert not host.applied_version.texts_pending
        assert "8080" in host.applied_version.nft_text
        last = PushLogEntry.objects.filter(host=host).order_by("-id").first()
        assert last.step == "confirm"
        assert last.ok

    # A policy change compiles in full; the next forward is a delta again.
    BlockedPort.objects.create(direction="inbound", protocol="tcp", first=4444, last=4444)
    assert paths(run(site, "blocked_port.save")) == {
        "delta": set(),
        "compile": {"pl-nat1", "pl-nat2"},
    }
    forward_add(member, device, ports="8081")
    assert paths(run(site, f"port_forward.create {member.pk}"))["delta"] == {"pl-nat1", "pl-nat2"}


def test_a_refused_increment_falls_back_to_full_and_the_next_change_is_a_delta(
    delta_on, hosts, monkeypatch
):
    site = delta_on
    member = member_active()
    device = device_add(member, "console")
    run(site, "device.add")
    step = compiled_module.delta_step
    calls = []

    def refused_once(base, changed):
        increment = step(base, changed)
        calls.append(1)
        if len(calls) == 1:  # the first host's increment: something its nft check refuses
            return dataclasses.replace(increment, nft=increment.nft + "bogus element line\n")
        return increment

    monkeypatch.setattr(compiled_module, "delta_step", refused_once)
    forward_add(member, device, ports="8080")
    timings = run(site, f"port_forward.create {member.pk}")
    used = paths(timings)
    assert used["delta"] == {"pl-nat1", "pl-nat2"}
    assert used["compile"] == {"pl-nat1"}  # refused: compiled in full and pushed that
    nat1 = FirewallHost.objects.get(name="pl-nat1")
    steps = list(PushLogEntry.objects.filter(host=nat1).order_by("-id")[:5])
    assert [(e.step, e.ok) for e in reversed(steps)][:2] == [("check", False), ("check", True)]
    assert not nat1.applied_version.texts_pending
    assert "8080" in nat1.applied_version.nft_text
    refused = RuleSetVersion.objects.filter(host=nat1, texts_pending=True)
    assert refused.count() == 1  # the refused delta version: never run, cannot be put back

    # A second change after the recovery: the delta path again, on both hosts.
    forward_add(member, device, ports="8081")
    timings = run(site, f"port_forward.create {member.pk}")
    assert paths(timings) == {"delta": {"pl-nat1", "pl-nat2"}, "compile": set()}, timings
    assert len(calls) == 4
    running = {h.name: h.applied_checksum for h in FirewallHost.objects.filter(site=site)}
    # The reconcile compiles in full, renders the running delta versions, finds the same texts
    # and pushes nothing.
    outcomes = site_sync(site=site, cause="reconcile (health check)")
    assert [o.skipped for o in outcomes] == [True, True], outcomes
    for host in FirewallHost.objects.filter(site=site):
        assert host.applied_checksum == running[host.name]
        assert "8081" in host.applied_version.nft_text
