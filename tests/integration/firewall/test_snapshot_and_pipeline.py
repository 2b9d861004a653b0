"""The DB -> snapshot bridge, compile into stored versions, and the lock/debounce pipeline."""

from __future__ import annotations

import threading
import time

import pytest

from apps.firewall.choices import PushStatus
from apps.firewall.compiled import CompileError, ruleset_compile
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.pipeline import (
    LockBusy,
    firewall_causes_take,
    firewall_change_request,
    lock_key,
    scheduled_key,
    site_lock,
)
from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
from apps.infra.redis import redis_client
from apps.members.services import member_suspend
from apps.network.models import Device
from tests.factories import MemberFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_redis(firewall_redis_clean):
    return


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
    # 14 for the rule set, 2 for DHCP (its settings row and the registration ranges).
    for _ in range(3):
        device_add(member_active())
    with django_assert_max_num_queries(16):
        small = snapshot_data_read()
    for _ in range(12):
        member = member_active()
        device_add(member)
        device_add(member)
    with django_assert_max_num_queries(16):
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


SITE = 990_001  # a site id nothing else uses: the lock needs no row


def test_lock_admits_one_holder_per_site_and_expires_by_itself():
    with site_lock(SITE, ttl=1), pytest.raises(LockBusy), site_lock(SITE):
        pass  # pragma: no cover - the second acquire must fail
    with site_lock(SITE), site_lock(SITE + 1):  # another site is never blocked
        pass
    # A holder that dies leaves the key behind; it expires.
    redis_client().set(lock_key(SITE), "dead-worker", ex=1)
    with pytest.raises(LockBusy), site_lock(SITE):
        pass  # pragma: no cover
    time.sleep(1.2)
    with site_lock(SITE):
        assert redis_client().get(lock_key(SITE))
    assert redis_client().get(lock_key(SITE)) is None


def test_a_live_holder_keeps_its_lock_past_the_expiry():
    with site_lock(SITE, ttl=0.6) as token:
        time.sleep(1.5)  # longer than the expiry: the holder's thread renewed it
        assert redis_client().get(lock_key(SITE)) == token
        with pytest.raises(LockBusy), site_lock(SITE):
            pass  # pragma: no cover
    assert redis_client().get(lock_key(SITE)) is None


def test_a_waiting_run_takes_the_lock_as_soon_as_it_is_released():
    redis_client().set(lock_key(SITE), "running-rollout", ex=30)
    timer = threading.Timer(0.3, lambda: redis_client().delete(lock_key(SITE)))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(LockBusy), site_lock(SITE, wait=0.1):
            pass  # pragma: no cover - still held after 0.1 s
        with site_lock(SITE, wait=5) as token:
            assert redis_client().get(lock_key(SITE)) == token
    finally:
        timer.cancel()
    assert 0.3 <= time.monotonic() - started < 1.5


def test_release_never_drops_someone_elses_lock():
    with site_lock(SITE, ttl=0.3) as token:
        # Another run took over (say, this holder was frozen past the expiry).
        redis_client().set(lock_key(SITE), "other-run", ex=30)
        time.sleep(0.4)  # the renewal sees a foreign token and leaves it alone
        assert token != "other-run"
    assert redis_client().get(lock_key(SITE)) == "other-run"


def test_a_burst_of_changes_schedules_one_run_per_site(settings, host):
    from apps.firewall.models import Site

    other = FirewallHost.objects.create(
        name="pl-nat2", address="10.255.255.12", site=Site.objects.create(name="south")
    )
    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 30  # the scheduled task does not run during the test
    queue_before = redis_client_broker_len()
    results = [firewall_change_request(cause=f"change {n}") for n in range(10)]
    both = sorted([host.site_id, other.site_id])
    assert [sorted(r) for r in results] == [both] + [[]] * 9
    assert redis_client_broker_len() == queue_before + 2  # one run per site, on its queue
    for site in both:
        assert firewall_causes_take(site) == ([f"change {n}" for n in range(10)], [])
        assert firewall_causes_take(site) == ([], [])
    # After a run took the causes, the next change schedules again.
    assert sorted(firewall_change_request(cause="later")) == both


def test_without_sync_changes_are_recorded_but_nothing_is_scheduled(settings, host):
    settings.PORTAL_FIREWALL_SYNC = False
    before = redis_client_broker_len()
    firewall_change_request(cause="x")
    assert redis_client_broker_len() == before
    assert firewall_causes_take(host.site_id) == (["x"], [])


def redis_client_broker_len() -> int:
    from apps.infra.celery import app

    with app.connection_for_write() as conn:
        return conn.default_channel.client.llen("firewall")


def test_a_lost_scheduled_run_delays_the_next_change_only_briefly(settings, host):
    from apps.firewall.pipeline import SCHEDULED_TTL

    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 30
    assert firewall_change_request(cause="first") == [host.site_id]
    # The queued task is lost (say, the queue was purged): the mark expires by itself soon.
    assert 0 < redis_client().ttl(scheduled_key(host.site_id)) <= SCHEDULED_TTL <= 15


def test_an_idle_site_runs_at_once_and_a_busy_one_after_the_debounce(settings, host, monkeypatch):
    from apps.firewall import dispatch

    sent = []
    monkeypatch.setattr(dispatch, "firewall_sync", lambda site, countdown: sent.append(countdown))
    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 0.3
    firewall_change_request(cause="idle")
    firewall_causes_take(host.site_id)  # the run started and took it
    with site_lock(host.site_id):  # a run is going on
        firewall_change_request(cause="busy")
    assert sent == [0, 0.3]
