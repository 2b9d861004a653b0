"""The snapshot reader reuses unchanged members: it must never serve a stale one.

Every change below is made the way it happens in production (services) or behind the ORM's
back (plain SQL), and after each one the cached read must equal a read built from nothing.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.firewall.snapshot import snapshot_cache_clear, snapshot_data_read
from apps.members.services import member_suspend
from apps.network.models import Device, Ipv6Opening, PortForward, ShapingProfile
from apps.network.services import device_remove, port_forward_delete
from tests.factories import device_add, forward_add, member_active, member_on_test, opening_add

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def cold_cache():
    snapshot_cache_clear()
    yield
    snapshot_cache_clear()


def members_now():
    """(cached read, read from nothing), as comparable dicts by member id."""
    cached = {m.id: m for m in snapshot_data_read().members}
    fresh = {m.id: m for m in snapshot_data_read(cached=False).members}
    return cached, fresh


def assert_fresh():
    cached, fresh = members_now()
    assert cached == fresh
    return cached


def sql(statement, params=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_cached_read_follows_every_kind_of_change():
    alice, bob = member_active(), member_active()
    laptop = device_add(alice, "laptop")
    phone = device_add(bob, "phone")
    assert_fresh()

    forward = forward_add(alice, laptop, "8080")
    assert len(assert_fresh()[alice.id].forwards) == 1

    opening_add(phone, "443")
    assert len(assert_fresh()[bob.id].openings) == 1

    # Behind the ORM's back: the triggers still see it.
    sql(
        "UPDATE network_portforward SET public_first = 9090, public_last = 9090, "
        "target_first = 9090, target_last = 9090 WHERE id = %s",
        [forward.id],
    )
    (changed,) = assert_fresh()[alice.id].forwards
    assert changed.public_ports.first == 9090

    sql("UPDATE network_ipv6opening SET enabled = false WHERE device_id = %s", [phone.id])
    assert assert_fresh()[bob.id].openings == ()

    sql("DELETE FROM network_ipv6opening WHERE device_id = %s", [phone.id])
    assert_fresh()

    port_forward_delete(forward=PortForward.objects.get(pk=forward.pk), actor=None)
    assert assert_fresh()[alice.id].forwards == ()

    device_remove(device=Device.objects.get(pk=phone.pk), actor=None)
    assert assert_fresh()[bob.id].devices == ()

    # A device moved to another member (another room: no IPv6 yet) changes both.
    sql("UPDATE network_device SET member_id = %s, ipv6 = NULL WHERE id = %s", [bob.id, laptop.id])
    members = assert_fresh()
    assert members[alice.id].devices == ()
    assert [d.id for d in members[bob.id].devices] == [laptop.id]

    member_suspend(member=bob, reason="unpaid", actor=None)
    assert bob.id not in assert_fresh()


def test_member_row_changes_are_seen_without_child_rows_changing():
    tester = member_on_test()
    device_add(tester)
    before = assert_fresh()[tester.id].shaping
    profile = ShapingProfile.objects.get(is_default=True)
    ShapingProfile.objects.filter(pk=profile.pk).update(down_kbit=profile.down_kbit * 2)
    after = assert_fresh()[tester.id].shaping
    assert after.down_kbit == before.down_kbit * 2

    # The public address goes away (row of another table, no trigger involved).
    member = member_active()
    device_add(member)
    assert assert_fresh()[member.id].public_ipv4 is not None
    sql("UPDATE network_publicaddress SET member_id = NULL WHERE member_id = %s", [member.id])
    assert assert_fresh()[member.id].public_ipv4 is None


def test_truncate_starts_over():
    member = member_active()
    device = device_add(member)
    opening_add(device, "22")
    assert len(assert_fresh()[member.id].openings) == 1
    sql("SET CONSTRAINTS ALL IMMEDIATE")  # TRUNCATE refuses pending deferred FK checks
    sql("TRUNCATE network_ipv6opening")
    assert assert_fresh()[member.id].openings == ()
    assert not Ipv6Opening.objects.exists()


def test_unchanged_members_are_reused_and_only_changed_ones_read_again():
    quiet, busy = member_active(), member_active()
    device_add(quiet)
    device = device_add(busy)
    first = {m.id: m for m in snapshot_data_read().members}
    with CaptureQueriesContext(connection) as queries:
        second = {m.id: m for m in snapshot_data_read().members}
    read = " ".join(q["sql"] for q in queries.captured_queries)
    for table in ("network_device", "network_portforward", "network_ipv6opening"):
        assert f'FROM "{table}"' not in read  # nothing changed: no per-member rows read
    assert second[quiet.id] is first[quiet.id]
    assert second[busy.id] is first[busy.id]
    forward_add(busy, device, "2222")
    third = {m.id: m for m in snapshot_data_read().members}
    assert third[quiet.id] is first[quiet.id]
    assert third[busy.id] is not first[busy.id]
    assert len(third[busy.id].forwards) == 1


def test_revision_bumps_follow_the_member_of_each_row():
    alice, bob = member_active(), member_active()
    laptop = device_add(alice)

    def revision(member):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT revision FROM firewall_member_rev WHERE member_id = %s", [member.id]
            )
            row = cursor.fetchone()
        return row and row[0]

    a, b = revision(alice), revision(bob)
    opening_add(laptop, "80")
    assert revision(alice) != a
    assert revision(bob) == b


def device_reads(queries):
    read = " ".join(q["sql"] for q in queries.captured_queries)
    return [t for t in ("network_device", "network_portforward") if f'FROM "{t}"' in read]


@pytest.mark.django_db(transaction=True)
def test_a_new_pool_process_warms_the_cache_in_the_background(settings):
    from apps.firewall.models import FirewallHost
    from workers.firewall import _snapshot_cache_warm_start

    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    member = member_active()
    device_add(member)
    settings.PORTAL_FIREWALL_SYNC = True
    _snapshot_cache_warm_start()  # what worker_process_init runs in each pool process
    (warming,) = [t for t in threading.enumerate() if t.name == "snapshot-cache-warm"]
    warming.join(timeout=30)
    with CaptureQueriesContext(connection) as queries:
        members = snapshot_data_read().members
    assert [m.id for m in members] == [member.id]
    assert device_reads(queries) == []  # the warm-up already built every member


@pytest.mark.django_db(transaction=True)
def test_the_warm_up_ends_with_a_full_collection():
    """The warm-up's objects are walked once there, not by a full collection during the first
    changes' runs (1.2-1.9 s at 100,000 members)."""
    import gc

    from apps.firewall.models import FirewallHost
    from workers.firewall import snapshot_cache_warm

    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    device_add(member_active())
    before = gc.get_stats()[2]["collections"]
    snapshot_cache_warm()
    assert gc.get_stats()[2]["collections"] > before


@pytest.mark.django_db(transaction=True)
def test_no_warm_up_without_sync_or_without_firewalls(settings):
    from workers.firewall import _snapshot_cache_warm_start, snapshot_cache_warm

    device_add(member_active())
    settings.PORTAL_FIREWALL_SYNC = False
    _snapshot_cache_warm_start()
    assert not [t for t in threading.enumerate() if t.name == "snapshot-cache-warm"]
    snapshot_cache_warm()  # no firewall host configured: nothing to compile for
    with CaptureQueriesContext(connection) as queries:
        snapshot_data_read()
    assert device_reads(queries) == ["network_device", "network_portforward"]


@pytest.mark.django_db(transaction=True)
def test_after_a_restart_the_warm_up_makes_the_first_change_an_increment():
    from apps.firewall import compiled
    from apps.firewall.memo import PUSH_MEMO
    from apps.firewall.models import FirewallHost

    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    member = member_active()
    device = device_add(member)
    (running,) = compiled.ruleset_compile(cause="first")
    host.mark_applied(running)
    PUSH_MEMO.compiled.clear()  # a fresh worker process: nothing compiled yet
    snapshot_cache_clear()
    host.refresh_from_db()
    # (No lab here: the warm-up does not connect to the host.)
    assert compiled.compiled_warm(connect=False) == ["pl-nat1"]  # it compiled what the host runs
    forward_add(member, device, ports="8443")
    (changed,) = compiled.ruleset_compile(cause="second")
    increment = compiled.increment_for(host=host, version=changed)
    assert increment is not None
    assert "8443" in increment.nft
    assert "delete table" not in increment.nft  # elements only, not the whole rule set


def _consumer_of(*queues: str) -> object:
    from types import SimpleNamespace

    names = [SimpleNamespace(name=q) for q in queues]
    return SimpleNamespace(task_consumer=SimpleNamespace(queues=names))


@pytest.mark.django_db(transaction=True)
def test_the_firewall_worker_takes_its_first_task_only_after_its_warm_up(settings, monkeypatch):
    """Celery sends worker_ready before its event loop fetches a message: when the handler
    returns, every host is compiled, so a change that came during the start is sent warm. The
    wait is bounded; a worker of other queues does not warm at all."""
    from apps.firewall.memo import PUSH_MEMO
    from apps.firewall.models import FirewallHost
    from apps.infra.celery import FIREWALL_QUEUE
    from workers import firewall

    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    device_add(member_active())
    settings.PORTAL_FIREWALL_SYNC = True
    monkeypatch.setattr(PUSH_MEMO, "compiled", {})
    firewall._warm_when_serving_firewall(sender=_consumer_of("mail", "default"))
    assert PUSH_MEMO.compiled == {}
    firewall._warm_when_serving_firewall(sender=_consumer_of(FIREWALL_QUEUE))
    assert list(PUSH_MEMO.compiled) == [host.pk]  # compiled before the first task is fetched

    release = threading.Event()
    monkeypatch.setattr(firewall, "snapshot_cache_warm", lambda: release.wait(30))
    settings.PORTAL_FIREWALL_WARM_WAIT = 0.2
    started = time.monotonic()
    firewall._warm_when_serving_firewall(sender=_consumer_of(FIREWALL_QUEUE))
    waited = time.monotonic() - started
    release.set()
    assert 0.2 <= waited < 5  # a warm-up that hangs holds the worker only this long


@pytest.mark.django_db(transaction=True)
def test_the_push_memo_forgets_everything_and_the_next_compile_is_the_same():
    """Every cache of the push path hangs off PUSH_MEMO; clear() empties all of them (the
    compiler's too), and what the next compile stores is what the first one did."""
    from apps.firewall.compiled import ruleset_compile
    from apps.firewall.memo import PUSH_MEMO
    from apps.firewall.models import FirewallHost

    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    member = member_active()
    forward_add(member, device_add(member), ports="8443")
    (first,) = ruleset_compile(cause="first")
    assert PUSH_MEMO.members.members
    assert PUSH_MEMO.compiled
    assert PUSH_MEMO.compiler.elements
    PUSH_MEMO.clear()
    assert not PUSH_MEMO.members.members
    assert not PUSH_MEMO.dhcp
    assert not PUSH_MEMO.compiled
    assert not PUSH_MEMO.compiler.elements
    assert PUSH_MEMO.compiler.member_sets is None
    (again,) = ruleset_compile(cause="again")
    assert again.content_hash == first.content_hash
