"""Two volunteers at the same moment: real concurrent transactions on separate connections."""

import threading

import pytest
from django.db import connections

from apps.members.services import member_check_in
from apps.network import errors
from apps.network.models import Device, PublicAddress
from apps.network.services import device_add
from tests.factories import MemberFactory, RoomFactory, member_active, pool_create

pytestmark = pytest.mark.django_db(transaction=True)


def race(*actions):
    """Run each action in its own thread and connection, released together by a barrier."""
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


def test_same_mac_at_the_same_moment_only_one_wins():
    # Different buildings: no shared subnet lock, so UNIQUE(mac) decides.
    a = member_active()
    b = member_active(room=RoomFactory())
    assert a.room.building_id != b.room.building_id
    mac = "02:11:22:33:44:55"
    outcomes = race(
        lambda: device_add(member=a, name="laptop", mac=mac, actor=None),
        lambda: device_add(member=b, name="laptop", mac=mac.upper().replace(":", "-"), actor=None),
    )
    kinds = sorted(kind for kind, _ in outcomes)
    assert kinds == ["error", "ok"], outcomes
    error = next(value for kind, value in outcomes if kind == "error")
    assert isinstance(error, errors.MacInUse)
    assert Device.objects.filter(mac=mac).count() == 1


def test_last_private_address_goes_to_exactly_one_device():
    from tests.factories import BuildingFactory

    building = BuildingFactory(subnets=("10.100.77.0/29", None))
    a, b = (member_active(room=RoomFactory(building=building)) for _ in range(2))
    for n in range(4):
        device_add(
            member=a if n % 2 else b, name=f"d{n}", mac=f"02:00:00:77:00:{n:02x}", actor=None
        )
    outcomes = race(
        lambda: device_add(member=a, name="x", mac="02:00:00:77:01:01", actor=None),
        lambda: device_add(member=b, name="y", mac="02:00:00:77:01:02", actor=None),
    )
    assert sorted(kind for kind, _ in outcomes) == ["error", "ok"], outcomes
    assert isinstance(next(v for k, v in outcomes if k == "error"), errors.SubnetExhausted)
    assert Device.objects.filter(ipv4="10.100.77.6").count() == 1


def test_last_public_address_goes_to_exactly_one_member():
    pool_create("198.51.100.0/30")  # .1 and .2
    member_active()
    a, b = MemberFactory(), MemberFactory()
    outcomes = race(
        lambda: member_check_in(member=a, actor=None),
        lambda: member_check_in(member=b, actor=None),
    )
    assert sorted(kind for kind, _ in outcomes) == ["error", "ok"], outcomes
    assert isinstance(next(v for k, v in outcomes if k == "error"), errors.PoolExhausted)
    assert PublicAddress.objects.filter(address="198.51.100.2").exclude(member=None).count() == 1
    assert PublicAddress.objects.filter(member__in=[a, b]).count() == 1
