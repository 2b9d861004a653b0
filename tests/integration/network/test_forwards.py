"""Port-forward services: every rule and refusal, the database constraint, and what happens to
forwards when devices, test accesses and memberships go away."""

import pytest
from django.db import IntegrityError, transaction

from apps.audit.models import AuditEntry
from apps.members.services import member_end, member_suspend
from apps.network import errors
from apps.network.models import BlockedPort, NetworkSettings, PortForward
from apps.network.ports import PortRange, PortRangeError
from apps.network.services import (
    device_remove,
    port_forward_change,
    port_forward_create,
    port_forward_delete,
)
from apps.testaccess.services import member_test_access_end
from tests.factories import (
    MemberFactory,
    device_add,
    forward_add,
    member_active,
    member_on_test,
)

pytestmark = pytest.mark.django_db


def state():
    return (
        list(
            PortForward.objects.order_by("pk").values_list(
                "pk", "protocol", "public_first", "public_last", "enabled", "public_address_id"
            )
        ),
        AuditEntry.objects.count(),
    )


def test_forward_is_created_on_the_members_public_address_and_audited():
    member = member_active()
    device = device_add(member, name="server")
    forward = forward_add(member, device, ports="8000-8010", target="9000-9010")
    forward.refresh_from_db()
    assert forward.public_address.member == member
    assert (forward.public_first, forward.public_last) == (8000, 8010)
    assert (forward.target_first, forward.target_last) == (9000, 9010)
    assert forward.enabled
    assert forward.protocol == "tcp"
    assert AuditEntry.objects.filter(action="port_forward.create", member=member).exists()


def test_target_ports_default_to_the_public_ports():
    forward = forward_add(member_active(), ports="25565", protocol="both")
    assert (forward.target_first, forward.target_last) == (25565, 25565)


@pytest.mark.parametrize(
    ("first", "second", "conflict"),
    [
        ("tcp", "tcp", True),
        ("udp", "udp", True),
        ("both", "tcp", True),
        ("both", "udp", True),
        ("tcp", "both", True),
        ("udp", "both", True),
        ("both", "both", True),
        ("tcp", "udp", False),
        ("udp", "tcp", False),
    ],
)
def test_overlap_per_protocol_both_overlaps_tcp_and_udp(first, second, conflict):
    member = member_active()
    device = device_add(member, name="laptop")
    forward_add(member, device, ports="8000-8010", protocol=first)
    if conflict:
        before = state()
        with pytest.raises(errors.PortForwardConflict) as refused:
            forward_add(member, device, ports="8010-8020", protocol=second)
        assert "8000-8010" in refused.value.message
        assert "laptop" in refused.value.message
        assert refused.value.field == "public_ports"
        assert state() == before
    else:
        forward_add(member, device, ports="8010-8020", protocol=second)
        assert PortForward.objects.count() == 2


def test_adjacent_ranges_do_not_overlap():
    member = member_active()
    device = device_add(member)
    forward_add(member, device, ports="8000-8010")
    forward_add(member, device, ports="8011-8020")
    forward_add(member, device, ports="7999")
    assert PortForward.objects.count() == 3


def test_two_members_may_forward_the_same_port():
    a, b = member_active(), member_active()
    forward_add(a, ports="80")
    forward_add(b, ports="80")
    assert PortForward.objects.count() == 2


def test_a_disabled_forward_still_reserves_its_ports():
    member = member_active()
    device = device_add(member)
    forward = forward_add(member, device, ports="8080")
    port_forward_change(forward=forward, enabled=False, actor=None)
    with pytest.raises(errors.PortForwardConflict):
        forward_add(member, device, ports="8080")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "does not exist"),
        ("65536", "does not exist"),
        ("70000-70010", "does not exist"),
        ("8010-8000", "reversed"),
        ("http", "Write a port"),
        ("80,443", "Write a port"),
        ("", "Write a port"),
    ],
)
def test_port_range_input_refusals(text, message):
    with pytest.raises(PortRangeError, match=message):
        PortRange.parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8080", (8080, 8080)), ("8000-8010", (8000, 8010)), (" 8000 - 8010 ", (8000, 8010))],
)
def test_port_range_input_accepts_a_port_or_a_range(text, expected):
    parsed = PortRange.parse(text)
    assert (parsed.first, parsed.last) == expected


def test_unequal_range_lengths_are_refused():
    member = member_active()
    before = state()
    with pytest.raises(errors.PortRangeInvalid) as refused:
        forward_add(member, ports="8000-8010", target="9000-9005")
    assert refused.value.field == "target_ports"
    assert PortForward.objects.count() == before[0].__len__()


def test_someone_elses_device_is_refused():
    a, b = member_active(), member_active()
    device_of_b = device_add(b)
    before = state()
    with pytest.raises(errors.DeviceNotUsable) as refused:
        forward_add(a, device_of_b)
    assert refused.value.field == "device"
    assert state() == before


@pytest.mark.parametrize("how", ["pending", "suspended"])
def test_a_device_of_an_inactive_membership_is_refused(how):
    member = member_active()
    device = device_add(member)
    if how == "suspended":
        member_suspend(member=member, reason="abuse", actor=None)
    else:
        member = MemberFactory()
        from apps.network.models import Device

        device = Device.objects.create(
            member=member, name="x", mac="02:99:00:00:00:01", ipv4="10.100.250.2"
        )
    with pytest.raises(errors.DeviceNotUsable, match="active membership or a test access"):
        forward_add(member, device)


def test_a_test_access_may_forward():
    member = member_on_test()
    forward_add(member)
    assert PortForward.objects.filter(member=member, enabled=True).count() == 1


def test_the_limit_per_member_is_the_admin_setting():
    settings = NetworkSettings.load()
    settings.port_forward_limit = 2
    settings.save()
    member = member_active()
    device = device_add(member)
    forward_add(member, device, ports="1000")
    forward_add(member, device, ports="1001")
    with pytest.raises(errors.LimitReached, match="at most 2"):
        forward_add(member, device, ports="1002")


def test_the_default_limit_is_20():
    assert NetworkSettings.load().port_forward_limit == 20


def test_blocked_inbound_ranges_are_refused_by_protocol():
    BlockedPort.objects.create(direction="inbound", protocol="tcp", first=135, last=139, note="SMB")
    member = member_active()
    device = device_add(member)
    with pytest.raises(errors.PortRangeInvalid, match="blocked") as refused:
        forward_add(member, device, ports="130-140")
    assert "SMB" in refused.value.message
    assert refused.value.field == "public_ports"
    with pytest.raises(errors.PortRangeInvalid):
        forward_add(member, device, ports="137", protocol="both")
    forward_add(member, device, ports="137", protocol="udp")  # only tcp is blocked


def test_outbound_blocks_do_not_limit_forwards():
    """Port 25 blocked outbound (spam) does not stop a member from running a mail server."""
    BlockedPort.objects.get_or_create(direction="outbound", protocol="tcp", first=25, last=25)
    member = member_active()
    forward = forward_add(member, ports="25")
    forward.refresh_from_db()
    assert (forward.public_first, forward.public_last, forward.enabled) == (25, 25, True)
    assert member.port_forwards.filter(pk=forward.pk).exists()


def test_a_range_over_several_forwards_names_every_one_of_them():
    member = member_active()
    nas = device_add(member, name="nas")
    game = device_add(member, name="console")
    for ports, device in (("440", nas), ("443", nas), ("450", game)):
        forward_add(member, device, ports=ports)
    before = state()
    with pytest.raises(errors.PortForwardConflict) as info:
        forward_add(member, nas, ports="430-460")
    message = str(info.value)
    assert "overlap 3 forwards" in message
    for part in ("440 → nas", "443 → nas", "450 → console"):
        assert part in message
    assert state() == before


def test_change_ports_conflict_names_the_other_forward_and_changes_nothing():
    member = member_active()
    device = device_add(member, name="nas")
    forward_add(member, device, ports="443")
    second = forward_add(member, device, ports="8443")
    before = state()
    with pytest.raises(errors.PortForwardConflict, match="443 → nas"):
        port_forward_change(forward=second, public_ports=PortRange(443, 443), actor=None)
    assert state() == before


def test_enable_disable_and_delete_are_audited_and_hooked(django_capture_on_commit_callbacks):
    from unittest import mock

    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
        forward = forward_add(member)
    with (
        mock.patch("apps.network.hooks.network_changed") as hook,
        django_capture_on_commit_callbacks(execute=True),
    ):
        port_forward_change(forward=forward, enabled=False, actor=None)
    assert hook.call_count == 1
    forward.refresh_from_db()
    assert not forward.enabled
    port_forward_change(forward=forward, enabled=True, actor=None)
    port_forward_delete(forward=forward, actor=None)
    actions = list(
        AuditEntry.objects.filter(member=member, action__startswith="port_forward").values_list(
            "action", flat=True
        )
    )
    assert {"port_forward.disable", "port_forward.enable", "port_forward.delete"} <= set(actions)
    assert not PortForward.objects.exists()


def test_enabling_needs_a_usable_membership():
    member = member_active()
    forward = forward_add(member)
    port_forward_change(forward=forward, enabled=False, actor=None)
    member_suspend(member=member, reason="unpaid", actor=None)
    with pytest.raises(errors.DeviceNotUsable):
        port_forward_change(forward=forward, enabled=True, actor=None)


def test_removing_a_device_deletes_its_forwards():
    member = member_active()
    device = device_add(member)
    forward_add(member, device)
    device_remove(device=device, actor=None)
    assert not PortForward.objects.exists()
    assert AuditEntry.objects.filter(action="port_forward.delete", member=member).exists()


def test_member_end_disables_and_detaches_the_forwards():
    member = member_active()
    forward = forward_add(member, ports="8080")
    address = forward.public_address
    member_end(member=member, actor=None)
    forward.refresh_from_db()
    assert not forward.enabled
    assert forward.public_address is None
    assert forward.device is None
    assert AuditEntry.objects.filter(action="port_forward.release", member=member).exists()
    # The address's next holder is not blocked by the old forward.
    address.refresh_from_db()
    assert address.member is None


def test_ending_a_test_access_releases_forwards_and_check_in_lets_them_be_enabled_again():
    from apps.members.services import member_check_in

    member = member_on_test()
    device = device_add(member)
    forward = forward_add(member, device, ports="8080")
    member_test_access_end(member=member, actor=None)
    forward.refresh_from_db()
    assert not forward.enabled
    assert forward.public_address is None
    assert forward.device == device
    member = member_check_in(member=member, actor=None)
    port_forward_change(forward=forward, enabled=True, actor=None)
    forward.refresh_from_db()
    assert forward.enabled
    assert forward.public_address.member == member


def test_the_database_refuses_overlaps_even_without_the_service():
    member = member_active()
    forward = forward_add(member, ports="5000-5010", protocol="both")
    for protocol in ("tcp", "udp", "both"):
        with pytest.raises(IntegrityError, match="portforward_no_overlap"), transaction.atomic():
            PortForward.objects.create(
                member=member,
                public_address=forward.public_address,
                device=forward.device,
                protocol=protocol,
                public_first=5010,
                public_last=5020,
                target_first=5010,
                target_last=5020,
            )


@pytest.mark.parametrize(
    ("first", "last", "tfirst", "tlast"),
    [(0, 0, 1, 1), (65536, 65536, 1, 1), (10, 5, 10, 5), (10, 20, 10, 15)],
)
def test_the_database_refuses_invalid_ranges(first, last, tfirst, tlast):
    member = member_active()
    device = device_add(member)
    with pytest.raises(IntegrityError), transaction.atomic():
        PortForward.objects.create(
            member=member,
            public_address=member.public_ipv4,
            device=device,
            protocol="tcp",
            public_first=first,
            public_last=last,
            target_first=tfirst,
            target_last=tlast,
        )


def test_create_directly_with_port_forward_create_checks_the_protocol():
    member = member_active()
    with pytest.raises(errors.PortRangeInvalid) as refused:
        port_forward_create(
            member=member,
            device=device_add(member),
            protocol="icmp",
            public_ports=PortRange(1, 1),
            actor=None,
        )
    assert refused.value.field == "protocol"
