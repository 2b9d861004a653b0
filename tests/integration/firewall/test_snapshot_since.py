"""A change's run reads only what changed: `snapshot_data_read(since_last=True)` reads the members
whose rows a transaction wrote since the last read's database snapshot (the triggers of
migrations firewall 0004 and 0019), and must never serve a stale member.

These tests commit (transaction=True): only a read in a transaction of its own keeps the
snapshot the next read is measured against. After each change below, the read since the last
one names exactly the changed members and builds what a read from nothing builds.
"""

from __future__ import annotations

import re

import psycopg
import pytest
import structlog.testing
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.firewall.memo import PUSH_MEMO
from apps.firewall.models import FirewallHost, Site
from apps.firewall.snapshot import snapshot_cache_clear, snapshot_data_read
from apps.members.models import Member
from apps.members.services import member_suspend
from apps.network.models import PortForward, ShapingProfile
from apps.network.services import port_forward_delete
from apps.testaccess.models import TestAccess
from tests.factories import (
    BuildingFactory,
    RoomFactory,
    device_add,
    forward_add,
    member_active,
    member_on_test,
    opening_add,
)

pytestmark = pytest.mark.django_db(transaction=True)

KEY_READ = '"firewall_member_rev"."revision"'  # only the member key query joins it


@pytest.fixture(autouse=True)
def cold_cache():
    snapshot_cache_clear()
    yield
    snapshot_cache_clear()


def sql(statement, params=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def read(**kwargs):
    """(the read's data, the members whose key rows it read: a set of ids, or "all")."""
    with CaptureQueriesContext(connection) as queries:
        data = snapshot_data_read(**kwargs)
    key_reads = [q["sql"] for q in queries.captured_queries if KEY_READ in q["sql"]]
    if not key_reads:
        return data, set()
    (query,) = key_reads
    found = re.search(r'"members_member"\."id" IN \(([\d, ]+)\)', query)
    return data, ({int(i) for i in found.group(1).split(",")} if found else "all")


def assert_as_fresh(data):
    """What the cached read built is what a read from nothing builds, in the same order."""
    fresh = snapshot_data_read(cached=False)
    assert data.members == fresh.members
    assert data.building_of == fresh.building_of
    assert data.reservations_of == fresh.reservations_of


def since(*changed):
    """A read since the last one: it reads the key rows of `changed` alone."""
    data, named = read(since_last=True)
    assert named == {m.id for m in changed}
    assert_as_fresh(data)
    return {m.id: m for m in data.members}


def test_a_read_since_the_last_sees_a_change_of_every_row_it_joins():
    north, south = BuildingFactory(), BuildingFactory()
    alice, erin = (member_active(room=RoomFactory(building=north)) for _ in range(2))
    bob, carol, dave = member_active(), member_active(), member_active()
    quiet = [member_active() for _ in range(3)]
    tester = member_on_test()
    laptop = device_add(alice, "laptop")
    for m in (bob, carol, dave, tester, *quiet):
        device_add(m)
    data, named = read(since_last=True)  # the first read checks every key
    assert named == "all"
    assert since() == {m.id: m for m in data.members}  # nothing changed: nothing read

    # Children (migration 0004): a device, a forward, an opening.
    forward = forward_add(alice, laptop, "8080")
    assert len(since(alice)[alice.id].forwards) == 1
    opening_add(laptop, "443")
    assert len(since(alice)[alice.id].openings) == 1
    port_forward_delete(forward=PortForward.objects.get(pk=forward.pk), actor=None)
    assert since(alice)[alice.id].forwards == ()

    # The member's row: its room (another building: another site, another prefix). Erin has
    # no device (a device's IPv6 is in its room's prefix).
    before = since()[erin.id].ipv6_prefixes
    room = RoomFactory(building=south)
    Member.objects.filter(pk=erin.pk).update(room=room)
    assert since(erin)[erin.id].ipv6_prefixes not in ((), before)
    assert snapshot_data_read(since_last=True).building_of[erin.id] == south.id
    # ... its room's rows, behind the ORM's back: the prefix, the building.
    sql("UPDATE members_room SET ipv6_prefix = '2001:db8:ffff:1::/64' WHERE id = %s", [room.id])
    assert [str(p) for p in since(erin)[erin.id].ipv6_prefixes] == ["2001:db8:ffff:1::/64"]
    sql("UPDATE members_room SET building_id = %s WHERE id = %s", [north.id, room.id])
    data, named = read(since_last=True)
    assert named == {erin.id}
    assert data.building_of[erin.id] == north.id
    assert_as_fresh(data)

    # Its public IPv4: taken away, another address.
    sql("UPDATE network_publicaddress SET member_id = NULL WHERE member_id = %s", [carol.id])
    assert since(carol)[carol.id].public_ipv4 is None
    sql(
        "UPDATE network_publicaddress SET address = '198.51.100.250' WHERE member_id = %s",
        [dave.id],
    )
    assert str(since(dave)[dave.id].public_ipv4) == "198.51.100.250"

    # Its test access: another profile, that profile's rates, no profile (the default's).
    fast = ShapingProfile.objects.create(name="fast", down_kbit=50000, up_kbit=20000)
    TestAccess.objects.filter(member=tester).update(profile=fast)
    assert since(tester)[tester.id].shaping.down_kbit == 50000
    ShapingProfile.objects.filter(pk=fast.pk).update(down_kbit=60000)
    assert since(tester)[tester.id].shaping.down_kbit == 60000
    TestAccess.objects.filter(member=tester).delete()
    default = ShapingProfile.default()  # (is_default, else "Test access")
    assert since(tester)[tester.id].shaping.down_kbit == default.down_kbit
    ShapingProfile.objects.filter(pk=default.pk).update(down_kbit=default.down_kbit + 8)
    assert since(tester)[tester.id].shaping.down_kbit == default.down_kbit + 8

    # Its status: it leaves the snapshot, and comes back (its id is lower than the newest's).
    member_suspend(member=bob, reason="unpaid", actor=None)
    assert bob.id not in since(bob)
    Member.objects.filter(pk=bob.pk).update(status="active")
    assert bob.id in since(bob)

    # A member row edit the snapshot does not read (the phone number) names nobody.
    Member.objects.filter(pk=dave.pk).update(phone="+49 30 1234")
    since()


def test_a_transaction_that_commits_after_a_later_one_is_not_missed():
    """Revisions are taken in trigger order, commits come in any order: a read in between sees
    the later revision first. The earlier one must still be read when it commits."""
    alice, bob = member_active(), member_active()
    device_add(alice)
    device_add(bob)
    read(since_last=True)
    db = connection.settings_dict
    params = {
        key: value
        for key, value in {
            "dbname": db["NAME"],
            "user": db["USER"],
            "password": db["PASSWORD"],
            "host": db["HOST"],
            "port": db["PORT"],
        }.items()
        if value
    }
    release = "UPDATE network_publicaddress SET member_id = NULL WHERE member_id = %s"
    with psycopg.connect(**params) as slow, psycopg.connect(**params) as fast:
        slow.execute(release, [alice.id])
        fast.execute(release, [bob.id])
        fast.commit()  # bob's revision is the higher one
        members = since(bob)
        assert members[alice.id].public_ipv4 is not None  # alice's change not committed yet
        slow.commit()
    assert since(alice)[alice.id].public_ipv4 is None


def test_a_read_in_a_callers_transaction_leaves_no_snapshot_to_read_since():
    """A caller's transaction may roll back what the read saw: the next read checks every key
    and does not serve the member that never was."""
    kept = member_active()
    device_add(kept)
    read(since_last=True)
    seen = {}

    def inside():
        with transaction.atomic():
            ghost = member_active()
            device_add(ghost)
            seen["data"], seen["named"] = read(since_last=True)
            seen["ghost"] = ghost.id
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        inside()
    assert seen["named"] == "all"
    assert seen["ghost"] in {m.id for m in seen["data"].members}
    data, named = read(since_last=True)
    assert named == "all"
    assert [m.id for m in data.members] == [kept.id]
    assert since() == {kept.id: data.members[0]}


def test_a_change_behind_the_triggers_back_is_repaired_by_a_checking_read():
    """The full compile stays the source of truth: its read checks every member's key, finds a
    change no trigger named (triggers disabled), builds it and says so."""
    member = member_active()
    device_add(member)
    read(since_last=True)
    sql("ALTER TABLE network_publicaddress DISABLE TRIGGER firewall_rev_upd")
    try:
        sql("UPDATE network_publicaddress SET member_id = NULL WHERE member_id = %s", [member.id])
    finally:
        sql("ALTER TABLE network_publicaddress ENABLE TRIGGER firewall_rev_upd")
    data, named = read(since_last=True)
    assert named == set()
    assert data.members[0].public_ipv4 is not None  # unseen: no trigger named it
    with structlog.testing.capture_logs() as logs:
        data, named = read()  # a full compile's read
    assert named == "all"
    assert_as_fresh(data)
    assert data.members[0].public_ipv4 is None
    (warning,) = [e for e in logs if e["event"] == "firewall.snapshot_unnamed_change"]
    assert warning["members"] == [member.id]


def test_a_change_in_another_site_costs_its_own_member_in_a_sites_run(firewall_redis_clean):
    """A change's site run reads the members changed since the worker's last read, one row
    each, wherever they live: not the site's members, not the portal's; a reconcile run checks
    every key."""
    from apps.firewall.compiled import ruleset_compile
    from apps.firewall.rollout import site_sync

    north, south = BuildingFactory(), BuildingFactory()
    sites = {"north": Site.objects.create(name="north"), "south": Site.objects.create(name="south")}
    sites["north"].buildings.set([north])
    sites["south"].buildings.set([south])
    host = FirewallHost.objects.create(
        name="north-fw", address="10.255.255.11", site=sites["north"]
    )
    north_members = [member_active(room=RoomFactory(building=north)) for _ in range(4)]
    bob = member_active(room=RoomFactory(building=south))
    for m in (*north_members, bob):
        device_add(m)
    (version,) = ruleset_compile(site=sites["north"], cause="first")
    FirewallHost.objects.filter(pk=host.pk).update(pinned_version=version)  # no push in here
    PUSH_MEMO.clear()

    def run(cause):
        with CaptureQueriesContext(connection) as queries:
            site_sync(site=sites["north"], cause=cause)
        return [q["sql"] for q in queries.captured_queries if KEY_READ in q["sql"]]

    assert len(run("port_forward.create")) == 1  # the worker's first read checks every key
    forward_add(bob, ports="2222")
    (key_read,) = run("port_forward.create")
    assert f'"members_member"."id" IN ({bob.id})' in key_read
    assert run("port_forward.create") == []  # nothing changed since
    (key_read,) = run("reconcile")
    assert '"members_member"."id" IN' not in key_read
