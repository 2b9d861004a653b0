"""The delta path of the site run, on the portal's side (no host: the lab test
tests/e2e/lab/test_delta_push.py pushes): a member-only change steps the host's delta base into
a version whose increment is what `diff` of two full compiles gives, rendered after the push
into the texts a full compile gives and recognised by the next full compile; anything else
compiles in full."""

from __future__ import annotations

import copy

import pytest

from apps.firewall.compiled import (
    compiled_warm,
    delta_base_ensure,
    delta_catch_up,
    delta_compile,
    delta_render,
    delta_render_pending,
    host_compile,
)
from apps.firewall.memo import PUSH_MEMO
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
from apps.members.models import Room
from apps.network.models import BlockedPort
from tests.factories import device_add, forward_add, member_active
from workers.ruleset import compile_bundle, diff
from workers.ruleset.delta import content_digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(settings):
    settings.PORTAL_FIREWALL_DELTA = True
    PUSH_MEMO.clear()
    row = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    yield FirewallHost.objects.select_related("site").get(pk=row.pk)
    PUSH_MEMO.clear()


def full(host: FirewallHost, cause: str = "full") -> RuleSetVersion:
    return host_compile(host=host, data=snapshot_data_read(), cause=cause)


def test_a_forward_is_a_step_that_ends_where_a_full_compile_does(host):
    member = member_active()
    device = device_add(member, "console")
    first = full(host)
    host.mark_applied(first)  # what a confirmed push records
    delta_base_ensure(host)
    before = PUSH_MEMO.compiled_entry(host.pk, first.content_hash).compiled

    forward_add(member, device, ports="8080")
    data = snapshot_data_read()
    version = delta_compile(host=host, data=data, cause="port_forward.create")
    assert version is not None
    fresh = compile_bundle(firewall_snapshot_build(host=host, data=data))
    expected = diff(before, fresh.compiled)

    def body(text: str) -> list[str]:  # the first line names the two versions' hashes
        return text.splitlines()[1:]

    assert body(version.delta_increment.nft) == body(expected.nft)
    assert version.delta_increment.tc == expected.tc
    assert "8080" in version.delta_increment.nft
    assert RuleSetVersion.objects.get(pk=version.pk).texts_pending  # not rendered yet
    assert PUSH_MEMO.delta[host.pk].base.digest == content_digest(fresh.compiled.ruleset)

    host.mark_applied(version)
    assert delta_render(version)
    stored = RuleSetVersion.objects.get(pk=version.pk)
    assert not stored.texts_pending
    assert stored.nft_text == fresh.compiled.nft
    assert stored.artefact_hashes == fresh.artefact_hashes
    # The next full compile of the same database names the same version: nothing to push.
    again = full(host, "reconcile")
    assert again.pk == version.pk
    assert host.runs(again.content_hash)
    # ... and its rule set is the base of the next full compile's increment.
    assert PUSH_MEMO.compiled_entry(host.pk, version.content_hash) is not None


def test_anything_but_members_compiles_in_full(host):
    member = member_active()
    device = device_add(member, "console")
    first = full(host)
    host.mark_applied(first)
    delta_base_ensure(host)
    # Nothing of this host changed: it keeps what it runs.
    same = delta_compile(host=host, data=snapshot_data_read(), cause="elsewhere")
    assert same is not None
    assert same.pk == first.pk

    BlockedPort.objects.create(direction="inbound", protocol="tcp", first=4444, last=4444)
    forward_add(member, device, ports="8080")
    assert delta_compile(host=host, data=snapshot_data_read(), cause="policy") is None


def test_no_step_without_a_confirmed_base(host, settings):
    member = member_active()
    device = device_add(member, "console")
    first = full(host)
    delta_base_ensure(host)  # the host confirmed nothing yet: no base
    assert host.pk not in PUSH_MEMO.delta
    host.mark_applied(first)
    delta_base_ensure(host)
    forward_add(member, device, ports="8080")
    host.mark_pending()  # a failed push: what it runs is not known
    assert delta_compile(host=host, data=snapshot_data_read(), cause="fwd") is None
    settings.PORTAL_FIREWALL_DELTA = False
    host.mark_applied(first)
    assert delta_compile(host=host, data=snapshot_data_read(), cause="fwd") is None


def test_a_restarted_worker_recognises_an_unrendered_delta_version(host):
    member = member_active()
    device = device_add(member, "console")
    first = full(host)
    host.mark_applied(first)
    delta_base_ensure(host)
    forward_add(member, device, ports="8080")
    version = delta_compile(host=host, data=snapshot_data_read(), cause="port_forward.create")
    host.mark_applied(version)  # confirmed; never rendered
    assert RuleSetVersion.objects.get(pk=version.pk).texts_pending

    PUSH_MEMO.clear()  # a new worker process
    assert compiled_warm(connect=False) == ["pl-nat1"]  # it runs what the warm-up compiled
    stored = RuleSetVersion.objects.get(pk=version.pk)
    assert not stored.texts_pending
    assert "8080" in stored.nft_text
    assert PUSH_MEMO.delta[host.pk].content_hash == version.content_hash
    assert PUSH_MEMO.compiled_entry(host.pk, version.content_hash) is not None
    # ... so the next forward is a delta again.
    forward_add(member, device, ports="8081")
    assert delta_compile(host=host, data=snapshot_data_read(), cause="fwd") is not None


def test_a_registered_removed_or_changed_device_is_a_step_with_keas_file_of_a_full_compile(
    host,
):
    """Devices are Kea's and portal-ra's input: a registration, a removal, a MAC change (also
    of a device without IPv6: Kea's file alone changes), a device of a second member take the
    delta path, and the step carries Kea's and portal-ra's
    texts byte for byte as a full compile of the same database renders them; a DHCP setting
    compiles in full."""
    from apps.dhcp.models import DhcpSettings
    from apps.firewall.models import Site
    from apps.network.services import device_change, device_remove

    FirewallHost.objects.filter(pk=host.pk).update(serves_dhcp=True)
    Site.objects.filter(pk=host.site_id).update(member_network4="10.0.0.0/8")
    host = FirewallHost.objects.select_related("site").get(pk=host.pk)
    member, other, plain = member_active(), member_active(), member_active()
    Room.objects.filter(pk=plain.room_id).update(ipv6_prefix=None)  # a room without IPv6
    plain.refresh_from_db()
    kept = device_add(member, "laptop")
    device_add(other, "phone")
    bare = device_add(plain, "printer")
    assert bare.ipv6 is None
    first = full(host)
    host.mark_applied(first)
    delta_base_ensure(host)

    def step(cause: str) -> RuleSetVersion:
        before = PUSH_MEMO.compiled_entry(host.pk, host.applied_checksum)
        data = snapshot_data_read()
        version = delta_compile(host=host, data=data, cause=cause)
        assert version is not None, cause
        fresh = compile_bundle(firewall_snapshot_build(host=host, data=data))
        files = dict(fresh.files)
        for name in ("kea-dhcp4", "portal-ra"):
            assert version.files[name] == files[name], (cause, name)
            assert version.artefact_hashes[name] == fresh.artefact_hashes[name]
        if before is not None:
            expected = diff(before.compiled, fresh.compiled)
            assert version.delta_increment.nft.splitlines()[1:] == expected.nft.splitlines()[1:]
        host.mark_applied(version)
        assert delta_render(version)
        stored = RuleSetVersion.objects.get(pk=version.pk)
        assert stored.files == files
        assert stored.artefact_hashes == fresh.artefact_hashes
        return version

    added = device_add(member, "console")
    v = step("device.add")
    assert added.mac in v.files["kea-dhcp4"]
    assert added.mac in v.files["portal-ra"]
    device_change(device=kept, actor=None, mac="02:42:00:00:00:77")
    v = step("device.change")
    assert "02:42:00:00:00:77" in v.files["kea-dhcp4"]
    assert kept.mac not in v.files["kea-dhcp4"]
    # Without IPv6 a MAC is Kea's reservation only: a step without elements (it compiled in
    # full before: no member's typed value changed, yet Kea's file did).
    device_change(device=bare, actor=None, mac="02:42:00:00:00:78")
    v = step("device.change without IPv6")
    assert "02:42:00:00:00:78" in v.files["kea-dhcp4"]
    assert bare.mac not in v.files["kea-dhcp4"]
    assert v.delta_increment.empty
    device_remove(device=added, actor=None)
    v = step("device.remove")
    assert added.mac not in v.files["kea-dhcp4"]
    device_add(other, "tablet")
    device_add(member, "tv")
    last = step("two members")
    # The next full compile of the same database names the same version: nothing to push.
    assert full(host, "reconcile").pk == last.pk

    DhcpSettings.objects.filter(pk=DhcpSettings.load().pk).update(lease_seconds=7200)
    device_add(member, "radio")
    assert delta_compile(host=host, data=snapshot_data_read(), cause="settings") is None


def _old_worker_steps(host, member, device, ports: str):
    """What the old worker does during a handover: the new one has warmed up (its base names
    what the host ran then); the old one steps its own base by a forward and the host confirms.
    Returns the new worker's base, as it was before that step."""
    stale = copy.deepcopy(PUSH_MEMO.delta[host.pk])  # the new worker's, from its warm-up
    forward_add(member, device, ports=ports)
    version = delta_compile(host=host, data=snapshot_data_read(), cause="port_forward.create")
    assert version is not None
    host.mark_applied(version)  # confirmed; never rendered
    return stale, version


def test_after_a_handover_the_new_worker_catches_up_and_a_burst_is_one_step(host):
    member = member_active()
    device = device_add(member, "console")
    host.mark_applied(full(host))
    PUSH_MEMO.clear()
    assert compiled_warm(connect=False) == ["pl-nat1"]  # the new worker is warm
    stale, pushed = _old_worker_steps(host, member, device, "8080")
    PUSH_MEMO.delta[host.pk] = stale  # ... and the old one stops: the new one goes
    assert not host.runs(stale.content_hash)

    assert delta_catch_up() == ["pl-nat1"]
    assert PUSH_MEMO.delta[host.pk].content_hash == pushed.content_hash
    # A burst right after the handover: one step with every forward of it, no full compile.
    for n in range(15):
        forward_add(member, device, ports=str(9000 + n))
    data = snapshot_data_read()
    version = delta_compile(host=host, data=data, cause="port_forward.create")
    assert version is not None
    assert all(f"{9000 + n}" in version.delta_increment.nft for n in range(15))
    fresh = compile_bundle(firewall_snapshot_build(host=host, data=data))
    assert PUSH_MEMO.delta[host.pk].base.digest == content_digest(fresh.compiled.ruleset)
    # The reconcile's full compile (after rendering what the host runs) names the same version.
    host.mark_applied(version)
    delta_render_pending(host)
    again = full(host, "reconcile")
    assert again.pk == version.pk


def test_a_catch_up_that_cannot_name_what_the_host_runs_leaves_the_next_change_to_the_full_path(
    host,
):
    member = member_active()
    device = device_add(member, "console")
    host.mark_applied(full(host))
    PUSH_MEMO.clear()
    compiled_warm(connect=False)
    stale, _pushed = _old_worker_steps(host, member, device, "8080")
    PUSH_MEMO.delta[host.pk] = stale
    forward_add(member, device, ports="8081")  # queued, not pushed by the old worker

    assert delta_catch_up() == []  # neither the step nor a new warm-up names what it runs
    assert host.pk not in PUSH_MEMO.delta
    assert delta_compile(host=host, data=snapshot_data_read(), cause="fwd") is None
