"""The lookup itself: times read in the portal's named time zone, bad input refused field by
field with nothing recorded, every answered lookup audited with its reason, evidence from the
DHCP leases, the retention prune and the backfill from the audit trail."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange

from apps.abuse.backfill import holdings_backfill
from apps.abuse.choices import HolderKind, HoldingSource, Verdict
from apps.abuse.inputs import LookupInvalid
from apps.abuse.models import AbuseLookup, AddressHolding
from apps.abuse.services import holdings_prune
from apps.audit.models import AuditEntry
from apps.dhcp.models import RegistrationRange
from apps.dhcp.services import LeaseRow, leases_store
from apps.dhcp.walled import registration_networks_forget
from apps.firewall.models import FirewallHost
from apps.members.services import member_check_in, member_end, member_move
from apps.network.services import device_change, device_remove
from tests.factories import (
    AddressHoldingFactory,
    RoomFactory,
    device_add,
    member_registered,
    pool_create,
)
from tests.integration.abuse.conftest import US

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(clock):
    pool_create()
    member = member_registered(first_name="Ann")
    member_check_in(member=member, actor=None)
    clock.advance(days=20)
    return member


def test_a_time_without_offset_is_read_in_the_portals_time_zone(clock, lookup, ann, settings):
    assert settings.TIME_ZONE == "Europe/Berlin"
    checked_in = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)  # 10:00 in Berlin (CET)
    address = ann.public_ipv4.address
    assert lookup(address, "2026-03-02 10:00").verdict == Verdict.HELD
    assert lookup(address, "2026-03-02 09:59:59.999999").verdict == Verdict.NOBODY
    assert lookup(address, "2026-03-02T09:00:00Z").at == checked_in
    assert lookup(address, "2026-03-02 09:00 UTC").verdict == Verdict.HELD
    assert lookup(address, "2026-03-02T10:00:00+01:00").verdict == Verdict.HELD
    assert lookup(address, "2026-03-02T08:59:59+00:00").verdict == Verdict.NOBODY
    assert lookup(f"::ffff:{address}", "2026-03-02 10:00").address == address


@pytest.mark.parametrize(
    ("address", "at", "reason", "field", "message"),
    [
        ("198.51.100.300", "2026-03-05 10:00", "ticket 7", "address", "not an IPv4 or IPv6"),
        ("198.51.100.0/24", "2026-03-05 10:00", "ticket 7", "address", "not a network"),
        ("", "2026-03-05 10:00", "ticket 7", "address", "Enter the address"),
        ("198.51.100.1", "last Tuesday 03:12", "ticket 7", "at", "is not a point in time"),
        ("198.51.100.1", "2026-03-05 25:00", "ticket 7", "at", "is not a point in time"),
        ("198.51.100.1", "2027-01-01 00:00", "ticket 7", "at", "in the future"),
        ("198.51.100.1", "2026-03-29 02:30", "ticket 7", "at", "does not exist in Europe/Berlin"),
        ("198.51.100.1", "2025-10-26 02:30", "ticket 7", "at", "+02:00 or +01:00"),
        ("198.51.100.1", "2026-03-05 10:00", "   ", "reason", "Say why you look this up"),
        ("198.51.100.1", "2026-03-05 10:00", "x" * 501, "reason", "at most 500 characters"),
    ],
)
def test_bad_input_is_refused_by_field_and_changes_nothing(
    lookup, ann, address, at, reason, field, message
):
    holdings, audits = AddressHolding.objects.count(), AuditEntry.objects.count()
    with pytest.raises(LookupInvalid) as refused:
        lookup(address, at, reason=reason)
    assert list(refused.value.errors) == [field]
    assert message in refused.value.errors[field][0]
    assert not AbuseLookup.objects.exists()
    assert (AddressHolding.objects.count(), AuditEntry.objects.count()) == (holdings, audits)


def test_every_field_that_is_wrong_is_named_at_once(lookup, ann):
    with pytest.raises(LookupInvalid) as refused:
        lookup("nope", "", reason="")
    assert sorted(refused.value.errors) == ["address", "at", "reason"]


def test_an_answered_lookup_is_audited_with_its_reason(clock, lookup, ann, make_user):
    desk = make_user(roles=("abuse",))
    address = ann.public_ipv4.address
    answer = lookup(address, "2026-03-03 04:12", reason="  Complaint  CERT-2026-0042 ", actor=desk)
    entry = AuditEntry.objects.get(action="abuse.lookup")
    assert (entry.actor, entry.object_id) == (desk, str(answer.lookup.pk))
    assert entry.changes == {
        "address": [None, address],
        "at": [None, "2026-03-03T04:12:00+01:00"],
        "reason": [None, "Complaint CERT-2026-0042"],
        "verdict": [None, "held"],
    }
    lookup_row = AbuseLookup.objects.get()
    assert (lookup_row.reason, lookup_row.verdict, lookup_row.member) == (
        "Complaint CERT-2026-0042",
        Verdict.HELD,
        ann,
    )
    assert AddressHolding.objects.filter(member=ann).count() == 1  # a lookup writes no history


def test_nobody_is_said_plainly_with_the_neighbouring_rows_and_for_foreign_addresses(
    clock, lookup, ann
):
    address = ann.public_ipv4.address
    before = lookup(address, dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    assert before.verdict == Verdict.NOBODY
    assert before.summary.startswith("Nobody held")
    assert [e.role for e in before.evidence] == ["after"]
    foreign = lookup("192.0.2.99", clock.now)
    assert foreign.verdict == Verdict.NOBODY
    assert any("none of our public pools" in note for note in foreign.notes)


def test_a_lookup_older_than_the_retention_says_the_history_may_have_forgotten(
    clock, lookup, ann, settings
):
    settings.PORTAL_ABUSE_HISTORY_DAYS = 10
    answer = lookup("198.51.100.99", dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    assert answer.verdict == Verdict.NOBODY
    assert any("10 days only" in note for note in answer.notes)


def test_the_prune_forgets_only_rows_that_ended_before_the_retention(clock, settings):
    settings.PORTAL_ABUSE_HISTORY_DAYS = 30
    t = clock.now
    old = AddressHoldingFactory(period=DateTimeTZRange(t, t + dt.timedelta(days=1)))
    recent = AddressHoldingFactory(
        period=DateTimeTZRange(t + dt.timedelta(days=5), t + dt.timedelta(days=40))
    )
    running = AddressHoldingFactory(address="198.51.100.78", period=DateTimeTZRange(t, None))
    clock.advance(days=31, seconds=1)
    assert holdings_prune() == 1
    assert set(AddressHolding.objects.values_list("pk", flat=True)) == {recent.pk, running.pk}
    assert old.pk not in AddressHolding.objects.values_list("pk", flat=True)


@pytest.fixture
def garden(clock):
    room = RoomFactory()
    RegistrationRange.objects.create(building=room.building, network="10.100.250.0/24")
    registration_networks_forget()
    yield FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)
    registration_networks_forget()


def _lease(address: str, mac: str, starts: dt.datetime, seconds: int = 120) -> LeaseRow:
    return LeaseRow(address, mac, starts, starts + dt.timedelta(seconds=seconds), "")


def test_walled_garden_leases_are_holdings_that_renewals_extend(clock, lookup, garden):
    t = clock.now
    a, b = "02:aa:00:00:00:01", "02:aa:00:00:00:02"
    leases_store(host=garden, rows=[_lease("10.100.250.5", a, t)])
    leases_store(host=garden, rows=[_lease("10.100.250.5", a, t + dt.timedelta(seconds=60))])
    rows = list(AddressHolding.objects.filter(kind=HolderKind.LEASE))
    assert [(r.mac, r.period.lower, r.period.upper) for r in rows] == [
        (a, t, t + dt.timedelta(seconds=180))
    ]
    # The address went to another MAC before A's lease ran out: A's row ends there.
    t_b = t + dt.timedelta(seconds=100)
    leases_store(host=garden, rows=[_lease("10.100.250.5", b, t_b)])
    clock.advance(minutes=10)
    assert lookup("10.100.250.5", t_b - US).holding.mac == a
    answer = lookup("10.100.250.5", t_b)
    assert (answer.verdict, answer.holding.mac, answer.holding.source) == (
        Verdict.HELD,
        b,
        HoldingSource.DHCP,
    )
    assert "unregistered device" in answer.summary
    assert any(e.kind == "lease" for e in answer.evidence)
    assert lookup("10.100.250.5", t_b + dt.timedelta(seconds=120)).verdict == Verdict.NOBODY


def test_a_registered_devices_lease_is_shown_as_evidence(clock, lookup, garden):
    pool_create()
    ann = member_registered(first_name="Ann")
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann, name="laptop")
    t = clock.advance(minutes=5)
    leases_store(host=garden, rows=[_lease(laptop.ipv4, laptop.mac, t, 3600)])
    assert not AddressHolding.objects.filter(kind=HolderKind.LEASE).exists()
    clock.advance(minutes=10)
    answer = lookup(laptop.ipv4, t)
    leases = [e for e in answer.evidence if e.kind == "lease"]
    assert len(leases) == 1
    assert laptop.mac in leases[0].what
    assert answer.notes == []


def test_backfill_from_the_audit_trail_rebuilds_the_recorded_history(clock, lookup):
    pool_create("198.51.100.0/29")
    room1, room2 = RoomFactory(), RoomFactory()
    ann = member_registered(room=room1, first_name="Ann")
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann, name="laptop")
    clock.advance(hours=1)
    phone = device_add(ann, name="phone")
    clock.advance(hours=1)
    device_change(device=laptop, mac="02:00:00:bb:00:01", actor=None)
    clock.advance(hours=1)
    member_move(member=ann, room=room2, actor=None)
    clock.advance(hours=1)
    device_remove(device=phone, actor=None)
    clock.advance(days=1)
    bob = member_registered(room=room1, first_name="Bob")
    member_check_in(member=bob, actor=None)
    device_add(bob, name="tv")
    clock.advance(days=1)
    member_end(member=ann, actor=None)
    clock.advance(days=1)

    def history():
        return sorted(
            (r.address, r.kind, r.state, r.period.lower, r.period.upper, r.member_id, r.mac)
            for r in AddressHolding.objects.all()
        )

    recorded = history()
    assert len(recorded) >= 10
    AddressHolding.objects.all().delete()
    outcome = holdings_backfill()
    assert history() == recorded
    assert set(AddressHolding.objects.values_list("source", flat=True)) == {HoldingSource.AUDIT}
    assert (outcome.written, outcome.unconfirmed) == (len(recorded), 0)
    again = holdings_backfill()
    assert (again.written, again.from_current_state) == (0, 0)
    assert history() == recorded


def test_backfill_covers_addresses_held_now_without_any_audit(clock):
    pool_create()
    ann = member_registered(first_name="Ann")
    member_check_in(member=ann, actor=None)
    device_add(ann)
    AddressHolding.objects.all().delete()
    AuditEntry.objects.all().delete()
    outcome = holdings_backfill()
    assert outcome.from_current_state == 3
    assert set(AddressHolding.objects.values_list("source", flat=True)) == {HoldingSource.CURRENT}


def test_the_prune_task_and_command_apply_the_retention(clock, settings, capsys):
    from django.core.management import call_command

    from workers.abuse import abuse_history_prune

    settings.PORTAL_ABUSE_HISTORY_DAYS = 1
    t = clock.now
    AddressHoldingFactory(period=DateTimeTZRange(t, t + dt.timedelta(hours=1)))
    AddressHoldingFactory(
        period=DateTimeTZRange(t + dt.timedelta(days=1), t + dt.timedelta(days=2))
    )
    clock.advance(days=2, hours=12)
    abuse_history_prune()
    assert AddressHolding.objects.count() == 1
    clock.advance(days=1)
    call_command("abuse_prune")
    assert "1 holding(s) older than 1 days" in capsys.readouterr().out
    assert not AddressHolding.objects.exists()


def test_the_lookup_log_is_read_only_in_the_admin(client_for, lookup, ann):
    from django.urls import reverse

    lookup(ann.public_ipv4.address, "2026-03-03 12:00", reason="CERT 42")
    client = client_for("admin")
    listing = client.get(reverse("admin:abuse_abuselookup_changelist"))
    assert listing.status_code == 200
    assert "CERT 42" in listing.content.decode()
    assert client.get(reverse("admin:abuse_abuselookup_add")).status_code == 403
