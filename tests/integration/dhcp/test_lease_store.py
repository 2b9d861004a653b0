"""The lease store (apps/dhcp/services.py `leases_store`): a host's reading is copied into a
staging table and merged in one statement. What the history holds after each reading must be
what the row-by-row merge it replaced wrote (`expected`, that merge written out), and a reading
read again writes nothing."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.utils import timezone

from apps.dhcp.models import Lease, RegistrationRange
from apps.dhcp.services import CONTINUES_WITHIN, LeaseRow, leases_store
from apps.dhcp.walled import registration_networks_forget
from apps.firewall.models import FirewallHost
from tests.factories import member_active

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
FIELDS = ("host_name", "mac", "address", "hostname", "registration", "starts", "ends", "seen_at")


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)


def table(host_name: str = "pl-nat1") -> list[tuple]:
    return sorted(Lease.objects.filter(host_name=host_name).values_list(*FIELDS))


def expected(history: list[list], rows: list[LeaseRow], now: dt.datetime, walled) -> int:
    """The merge as the row-by-row store did it, on `history` (lists of FIELDS, in place):
    each lease against the open row of its MAC and address as it was before the reading."""
    open_rows: dict[tuple, tuple[list, dt.datetime]] = {}
    for row in history:
        if row[6] >= now - dt.timedelta(days=7):
            known = open_rows.get((row[1], row[2]))
            if known is None or row[6] > known[1]:
                open_rows[(row[1], row[2])] = (row, row[6])
    extended: set[int] = set()
    created = 0
    for r in rows:
        known = open_rows.get((r.mac, r.address))
        if known is not None and r.starts <= known[1] + CONTINUES_WITHIN:
            row, ends = known
            if r.ends > ends and r.ends >= row[6]:
                row[3], row[6], row[7] = r.hostname, r.ends, now
            if r.ends > ends:
                extended.add(id(row))
            continue
        history.append(["pl-nat1", r.mac, r.address, r.hostname, walled(r.address), r.starts,
                        r.ends, now])  # fmt: skip
        created += 1
    return len(extended) + created


def lease(n: int, starts: dt.datetime, seconds: int = 3600, name: str = "") -> LeaseRow:
    return LeaseRow(
        f"10.100.{n // 200}.{n % 200 + 10}",
        f"02:00:00:00:{n // 256:02x}:{n % 256:02x}",
        starts,
        starts + dt.timedelta(seconds=seconds),
        name or f"dev{n}",
    )


def test_a_first_reading_stores_every_lease_once_and_the_same_reading_again_writes_nothing(host):
    rows = [lease(n, NOW - dt.timedelta(minutes=10)) for n in range(500)]
    assert leases_store(host=host, rows=rows, now=NOW) == 500
    first = table()
    assert len(first) == 500
    assert first[0][3] == "dev0"  # the client's name
    assert leases_store(host=host, rows=rows, now=NOW + dt.timedelta(seconds=15)) == 0
    assert table() == first  # not even seen_at moves: nothing was written


def test_a_renewal_extends_its_row_and_a_lapsed_lease_starts_a_new_one(host):
    start = NOW - dt.timedelta(hours=2)
    leases_store(host=host, rows=[lease(1, start), lease(2, start)], now=start)
    later = start + dt.timedelta(minutes=30)
    renewed = lease(1, later, name="laptop")  # renewed in time: the same lease continues
    lapsed = lease(2, start + dt.timedelta(hours=1, minutes=5))  # after its end ran out
    assert leases_store(host=host, rows=[renewed, lapsed], now=later) == 2
    rows = Lease.objects.filter(host_name="pl-nat1").order_by("mac", "starts")
    assert [(r.mac, r.starts, r.ends, r.hostname) for r in rows] == [
        (renewed.mac, start, renewed.ends, "laptop"),
        (lapsed.mac, start, start + dt.timedelta(hours=1), "dev2"),
        (lapsed.mac, lapsed.starts, lapsed.ends, "dev2"),
    ]


def test_the_history_is_what_the_row_by_row_merge_wrote_over_many_readings(host):
    """Random readings over 40 devices (renewals early and late, address changes, shorter
    leases, repeats, two rows in one reading): after each, the table and the count written
    equal the row-by-row merge's."""
    member = member_active()
    RegistrationRange.objects.create(building=member.room.building, network="10.100.1.0/24")
    registration_networks_forget()
    rng = random.Random(26)  # noqa: S311 - test data
    history: list[list] = []
    current = {n: (NOW - dt.timedelta(days=2), n) for n in range(40)}
    now = NOW - dt.timedelta(days=2)
    try:
        for _ in range(30):
            now += dt.timedelta(minutes=rng.choice([1, 10, 50, 90]))
            rows = []
            for n in rng.sample(range(40), 25):
                starts, slot = current[n]
                move = rng.random()
                if move < 0.4:
                    starts = now - dt.timedelta(seconds=rng.randrange(0, 60))  # renewed now
                elif move < 0.5:
                    slot = rng.randrange(0, 400)  # another address
                    starts = now
                current[n] = (starts, slot)
                seconds = rng.choice([600, 3600, 300])
                row = lease(slot, starts, seconds, name=f"d{n}")
                rows.append(
                    LeaseRow(row.address, lease(n, now).mac, starts, row.ends, row.hostname)
                )
            rows.append(rows[0])  # the same lease twice in one reading (both hosts' view)

            def walled(address: str) -> bool:
                return address.startswith("10.100.1.")

            want = expected(history, rows, now, walled)
            assert leases_store(host=host, rows=rows, now=now) == want
            assert table() == sorted(tuple(r) for r in history)
    finally:
        registration_networks_forget()
    assert any(r[4] for r in history)  # the registration range was hit


def test_a_reading_of_one_host_leaves_another_hosts_history_alone(host):
    other = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", serves_dhcp=True)
    rows = [lease(n, NOW - dt.timedelta(minutes=5)) for n in range(20)]
    leases_store(host=other, rows=rows, now=NOW)
    theirs = table("pl-nat2")
    assert leases_store(host=host, rows=rows, now=NOW) == 20  # new for this host
    assert table("pl-nat2") == theirs
    assert leases_store(host=host, rows=[], now=NOW) == 0
    assert len(table()) == 20
