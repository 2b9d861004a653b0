"""Two requests for the same public port at the same moment: real transactions in two threads,
released together. Exactly one forward exists afterwards; PostgreSQL's exclusion constraint is
what decides."""

import threading

import pytest
from django.db import IntegrityError, OperationalError, connections, transaction

from apps.network import errors
from apps.network.models import PortForward
from apps.network.ports import PortRange
from apps.network.services import port_forward_create
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)


def race(*actions):
    barrier = threading.Barrier(len(actions))
    outcomes = [None] * len(actions)

    def run(i, action):
        try:
            barrier.wait(timeout=10)
            outcomes[i] = ("ok", action())
        except Exception as exc:
            outcomes[i] = ("error", exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def test_two_requests_for_the_same_port_end_with_exactly_one_forward():
    member = member_active()
    laptop, desktop = device_add(member, name="laptop"), device_add(member, name="desktop")
    outcomes = race(
        lambda: port_forward_create(
            member=member,
            device=laptop,
            protocol="tcp",
            public_ports=PortRange(8080, 8080),
            actor=None,
        ),
        lambda: port_forward_create(
            member=member,
            device=desktop,
            protocol="both",
            public_ports=PortRange(8000, 8090),
            actor=None,
        ),
    )
    assert sorted(kind for kind, _ in outcomes) == ["error", "ok"], outcomes
    winner = next(value for kind, value in outcomes if kind == "ok")
    error = next(value for kind, value in outcomes if kind == "error")
    assert isinstance(error, errors.PortForwardConflict)
    assert winner.public_ports in error.message
    assert winner.device.name in error.message
    assert PortForward.objects.count() == 1


def test_the_constraint_alone_decides_between_two_raw_inserts():
    """No service and no lock: two plain INSERTs race and the exclusion constraint refuses one.

    Each INSERT places its tuple and then checks the constraint; when both find the other's
    uncommitted tuple at once, each waits for the other and PostgreSQL's deadlock detector aborts
    one (SQLSTATE 40P01, "while checking exclusion constraint"). Either way the constraint refused
    the loser and exactly one row exists."""
    member = member_active()
    device = device_add(member)
    address = member.public_ipv4

    def insert(protocol, first, last):
        def run():
            with transaction.atomic():
                return PortForward.objects.create(
                    member=member,
                    public_address=address,
                    device=device,
                    protocol=protocol,
                    public_first=first,
                    public_last=last,
                    target_first=first,
                    target_last=last,
                )

        return run

    outcomes = race(insert("udp", 5000, 5000), insert("both", 4990, 5010))
    assert sorted(kind for kind, _ in outcomes) == ["error", "ok"], outcomes
    error = next(value for kind, value in outcomes if kind == "error")
    if isinstance(error, OperationalError):
        assert error.__cause__.sqlstate == "40P01", error
        assert "exclusion constraint" in str(error)
    else:
        assert isinstance(error, IntegrityError), error
        assert "portforward_no_overlap" in str(error)
    assert PortForward.objects.count() == 1
