"""The delta compile's database side: members read by id (`snapshot_members_read`) are what a
full read builds, and increments compiled from them alone leave the content a full compile of
the whole database gives (the pure equivalence proof is tests/unit/ruleset/test_delta.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.firewall.snapshot import snapshot_data_read, snapshot_members_read
from apps.members.services import member_suspend
from apps.network.models import Device, PortForward
from apps.network.services import device_remove, port_forward_delete
from tests.factories import device_add, forward_add, member_active, member_on_test, opening_add
from workers import ruleset as rs
from workers.ruleset.delta import DeltaBase, content_digest, delta_step

pytestmark = pytest.mark.django_db

HOST = rs.Host(name="pl-delta", uplink_interfaces=("pl-du",), member_interfaces=("pl-dd",))


def full_snapshot() -> rs.Snapshot:
    data = snapshot_data_read(cached=False)
    return rs.Snapshot(policy=data.policy, host=HOST, members=data.members)


def test_increments_from_members_read_by_id_follow_every_kind_of_change():
    alice, bob, tester = member_active(), member_active(), member_on_test()
    laptop = device_add(alice, "laptop")
    phone = device_add(bob, "phone")
    device_add(tester)
    snap = full_snapshot()
    base = DeltaBase.from_ruleset(snap, rs.build(snap))

    def step(*members) -> rs.Incremental:
        ids = [m.id for m in members]
        read = snapshot_members_read(ids)
        fresh = {m.id: m for m in full_snapshot().members}
        assert read == {mid: fresh.get(mid) for mid in ids}  # what a full read builds
        increment = delta_step(base, read)
        assert base.digest == content_digest(rs.build(full_snapshot()))
        return increment

    forward = forward_add(alice, laptop, "8080")
    assert "add element ip portal_nat fwd_tcp" in step(alice).nft
    opening = step(bob)  # nothing changed for bob: an empty increment
    assert opening.empty
    opening_add(phone, "443")
    assert "open6_ports" in step(bob).nft
    port_forward_delete(forward=PortForward.objects.get(pk=forward.pk), actor=None)
    assert step(alice).deleted >= 1
    device_remove(device=Device.objects.get(pk=phone.pk), actor=None)
    assert step(bob).deleted >= 1
    member_suspend(member=alice, reason="unpaid", actor=None)
    gone = step(alice)
    assert gone.deleted >= 2  # src_nat, dev4_pub, accounting: everything of alice
    assert snapshot_members_read([alice.id]) == {alice.id: None}
    assert step(tester).empty  # shaped, unchanged: its classes stay


def test_members_read_by_id_cost_the_same_few_queries_whatever_the_site():
    members = [member_active() for _ in range(6)]
    for m in members:
        device_add(m)
    with CaptureQueriesContext(connection) as one:
        snapshot_members_read([members[0].id])
    with CaptureQueriesContext(connection) as some:
        snapshot_members_read([m.id for m in members[:4]])
    assert len(one.captured_queries) == len(some.captured_queries) <= 8
    assert snapshot_members_read([]) == {}
    assert snapshot_members_read([10**9]) == {10**9: None}


def test_a_member_outside_the_hosts_site_reads_as_none():
    member = member_active()
    device_add(member)
    own = member.room.building_id
    assert snapshot_members_read([member.id], buildings={own})[member.id] is not None
    assert snapshot_members_read([member.id], buildings={own + 1000}) == {member.id: None}
    assert snapshot_members_read([member.id], buildings=set())[member.id] is not None  # all
