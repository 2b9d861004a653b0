"""The DB -> snapshot bridge, compile into stored versions, and the lock/debounce pipeline."""

from __future__ import annotations

import threading
import time

import pytest

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.pipeline import (
    LOCK_KEY,
    SCHEDULED_KEY,
    LockBusy,
    firewall_causes_take,
    firewall_change_request,
    firewall_lock,
)
from apps.firewall.selectors import firewall_snapshot_build, snapshot_data_read
from apps.firewall.services import CompileError, ruleset_compile
from apps.members.services import member_suspend
from apps.network.models import Device
from portal.redis import redis_client
from tests.factories import MemberFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_redis():
    client = redis_client()
    keys = [LOCK_KEY, SCHEDULED_KEY, "portal:firewall:causes"]
    client.delete(*keys)
    yield
    client.delete(*keys)


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def test_snapshot_carries_networked_members_and_their_addresses(host):
    active = member_active()
    laptop = device_add(active, "laptop")
    pending = MemberFactory()
    suspended = member_active()
    device_add(suspended, "phone")
    member_suspend(member=suspended, reason="unpaid", actor=None)
    snapshot = firewall_snapshot_build(host=host)
    members = {m.id: m for m in snapshot.members}
    assert set(members) == {active.id}
    assert pending.id not in members
    (device,) = members[active.id].devices
    assert str(device.ipv4) == laptop.ipv4
    assert str(members[active.id].public_ipv4) == active.public_ipv4.address
    assert snapshot.host.member_interfaces == ("dorm0",)


def test_snapshot_reads_a_constant_number_of_queries(host, django_assert_max_num_queries):
    for _ in range(3):
        device_add(member_active())
    with django_assert_max_num_queries(14):
        small = snapshot_data_read()
    for _ in range(12):
        member = member_active()
        device_add(member)
        device_add(member)
    with django_assert_max_num_queries(14):
        large = snapshot_data_read()
    assert len(large.members) == len(small.members) + 12


def test_compile_stores_one_version_per_host_and_dedupes(host):
    FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1)
    FirewallHost.objects.create(name="off", address="10.255.255.13", enabled=False)
    device_add(member_active())
    first = ruleset_compile(cause="test")
    assert [v.host.name for v in first] == ["pl-nat1", "pl-nat2"]
    again = ruleset_compile(cause="again")
    assert [v.pk for v in again] == [v.pk for v in first]
    assert again[0].snapshot_at >= first[0].snapshot_at
    device_add(member_active())
    changed = ruleset_compile(cause="new device")
    assert changed[0].pk != first[0].pk
    assert changed[0].content_hash != first[0].content_hash
    assert RuleSetVersion.objects.filter(host=host).count() == 2


def test_inconsistent_data_fails_the_compile_with_the_row_named(host):
    member = member_active()
    device = device_add(member)
    # A device whose IPv6 lies outside its room's /64 (only possible behind the services' back).
    Device.objects.filter(pk=device.pk).update(ipv6="2001:db8:ffff::99")
    with pytest.raises(CompileError, match=f"device #{device.pk}"):
        ruleset_compile(cause="test")
    host.refresh_from_db()
    assert host.push_status == PushStatus.ERROR
    assert f"device #{device.pk}" in host.error_reason
    assert not RuleSetVersion.objects.exists()


def test_lock_admits_one_holder_and_expires_by_itself():
    with firewall_lock(ttl=1), pytest.raises(LockBusy), firewall_lock():
        pass  # pragma: no cover - the second acquire must fail
    # A holder that dies leaves the key behind; it expires.
    redis_client().set(LOCK_KEY, "dead-worker", ex=1)
    with pytest.raises(LockBusy), firewall_lock():
        pass  # pragma: no cover
    time.sleep(1.2)
    with firewall_lock():
        assert redis_client().get(LOCK_KEY)
    assert redis_client().get(LOCK_KEY) is None


def test_a_waiting_run_takes_the_lock_as_soon_as_it_is_released():
    redis_client().set(LOCK_KEY, "running-rollout", ex=30)
    timer = threading.Timer(0.3, lambda: redis_client().delete(LOCK_KEY))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(LockBusy), firewall_lock(wait=0.1):
            pass  # pragma: no cover - still held after 0.1 s
        with firewall_lock(wait=5) as token:
            assert redis_client().get(LOCK_KEY) == token
    finally:
        timer.cancel()
    assert 0.3 <= time.monotonic() - started < 1.5


def test_release_never_drops_someone_elses_lock():
    with firewall_lock(ttl=1):
        time.sleep(1.2)  # ours expired; another run takes the lock
        redis_client().set(LOCK_KEY, "other-run", ex=30)
    assert redis_client().get(LOCK_KEY) == "other-run"


def test_a_burst_of_changes_schedules_one_run(settings):
    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 30  # the scheduled task does not run during the test
    queue_before = redis_client_broker_len()
    results = [firewall_change_request(cause=f"change {n}") for n in range(10)]
    assert results == [True] + [False] * 9
    assert redis_client_broker_len() == queue_before + 1
    assert firewall_causes_take() == [f"change {n}" for n in range(10)]
    assert firewall_causes_take() == []
    # After a run took the causes, the next change schedules again.
    assert firewall_change_request(cause="later") is True


def test_without_sync_changes_are_recorded_but_nothing_is_scheduled(settings):
    settings.PORTAL_FIREWALL_SYNC = False
    before = redis_client_broker_len()
    firewall_change_request(cause="x")
    assert redis_client_broker_len() == before
    assert firewall_causes_take() == ["x"]


def redis_client_broker_len() -> int:
    from portal.celery import app

    with app.connection_for_write() as conn:
        return conn.default_channel.client.llen("celery")


def test_a_lost_scheduled_run_delays_the_next_change_only_briefly(settings):
    from apps.firewall.pipeline import SCHEDULED_TTL

    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 30
    assert firewall_change_request(cause="first") is True
    # The queued task is lost (say, the queue was purged): the mark expires by itself soon.
    assert 0 < redis_client().ttl(SCHEDULED_KEY) <= SCHEDULED_TTL <= 15
