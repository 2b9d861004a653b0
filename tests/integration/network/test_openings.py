"""IPv6 openings: ports or all ports per device, overlaps, policy, ownership and lifecycle."""

import pytest

from apps.audit.models import AuditEntry
from apps.members.services import member_end, member_suspend
from apps.network import errors
from apps.network.models import BlockedPort, Ipv6Opening, NetworkSettings
from apps.network.ports import PortRange
from apps.network.services import device_remove, ipv6_opening_change, ipv6_opening_delete
from tests.factories import BuildingFactory, RoomFactory, device_add, member_active, opening_add

pytestmark = pytest.mark.django_db


def test_opening_ports_of_a_device():
    member = member_active()
    device = device_add(member)
    opening = opening_add(device, ports="8000-8010", protocol="udp")
    assert (opening.port_first, opening.port_last, opening.protocol) == (8000, 8010, "udp")
    assert AuditEntry.objects.filter(action="ipv6_opening.create", member=member).exists()


def test_all_ports_is_protocol_both_without_ports():
    device = device_add(member_active())
    opening = opening_add(device, ports=None)
    assert opening.all_ports
    assert opening.protocol == "both"
    from apps.network.services import ipv6_opening_create

    other = device_add(device.member)
    with pytest.raises(errors.PortRangeInvalid, match="All ports"):
        ipv6_opening_create(device=other, protocol="tcp", ports=None, actor=None)


def test_overlapping_openings_of_one_device_are_refused_and_named():
    device = device_add(member_active(), name="pi")
    opening_add(device, ports="22")
    with pytest.raises(errors.Ipv6OpeningConflict, match="22 of pi"):
        opening_add(device, ports="20-30", protocol="both")
    opening_add(device, ports="22", protocol="udp")
    with pytest.raises(errors.Ipv6OpeningConflict):
        opening_add(device, ports=None)  # all ports overlaps everything


def test_the_same_port_on_two_devices_is_fine():
    member = member_active()
    opening_add(device_add(member), ports="443")
    opening_add(device_add(member), ports="443")
    assert Ipv6Opening.objects.count() == 2


def test_blocked_inbound_ranges_apply_to_openings():
    BlockedPort.objects.create(direction="inbound", protocol="both", first=445, last=445)
    with pytest.raises(errors.PortRangeInvalid, match="blocked") as refused:
        opening_add(device_add(member_active()), ports="440-450")
    assert refused.value.field == "ports"


def test_someone_elses_or_an_inactive_device_is_refused():
    from apps.network.services import ipv6_opening_create

    member = member_active()
    device = device_add(member)
    member_suspend(member=member, reason="x", actor=None)
    with pytest.raises(errors.DeviceNotUsable):
        ipv6_opening_create(device=device, protocol="tcp", ports=PortRange(1, 1), actor=None)


def test_a_device_without_ipv6_cannot_be_opened():
    building = BuildingFactory(subnets=("10.100.200.0/24", None))
    member = member_active(room=RoomFactory(building=building))
    with pytest.raises(errors.DeviceNotUsable, match="no IPv6"):
        opening_add(device_add(member))


def test_limit_per_member():
    settings = NetworkSettings.load()
    settings.ipv6_opening_limit = 1
    settings.save()
    device = device_add(member_active())
    opening_add(device, ports="1")
    with pytest.raises(errors.LimitReached):
        opening_add(device, ports="2")


def test_change_disable_delete():
    device = device_add(member_active())
    opening = opening_add(device, ports="80")
    ipv6_opening_change(opening=opening, ports=PortRange(8080, 8081), actor=None)
    ipv6_opening_change(opening=opening, enabled=False, actor=None)
    opening.refresh_from_db()
    assert (opening.port_first, opening.port_last, opening.enabled) == (8080, 8081, False)
    ipv6_opening_change(opening=opening, ports=None, protocol="both", actor=None)
    opening.refresh_from_db()
    assert opening.all_ports
    ipv6_opening_delete(opening=opening, actor=None)
    assert not Ipv6Opening.objects.exists()


def test_openings_go_with_their_device_and_with_the_membership():
    member = member_active()
    a, b = device_add(member), device_add(member)
    opening_add(a)
    opening_add(b)
    device_remove(device=a, actor=None)
    assert Ipv6Opening.objects.count() == 1
    member_end(member=member, actor=None)
    assert not Ipv6Opening.objects.exists()
    assert AuditEntry.objects.filter(action="ipv6_opening.delete", member=member).count() == 2
