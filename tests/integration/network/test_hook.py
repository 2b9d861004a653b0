"""Every write to network state reaches network_changed exactly once per transaction, after the
commit, and never on a rollback."""

from unittest import mock

import pytest
from django.db import transaction

from apps.members import services as members
from apps.network import errors
from apps.network import services as network
from apps.testaccess import services as testaccess
from tests.factories import BuildingFactory, MemberFactory, RoomFactory, member_active, pool_create
from tests.factories import device_add as add

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook():
    with mock.patch("apps.network.hooks.network_changed") as fake:
        yield fake


def _writes():
    """(name, setup, action) for every write service that changes network state."""
    return {
        "device_add": lambda m, d: network.device_add(
            member=m, name="new", mac="02:aa:00:00:00:09", actor=None
        ),
        "device_change": lambda m, d: network.device_change(device=d, name="renamed", actor=None),
        "device_remove": lambda m, d: network.device_remove(device=d, actor=None),
        "member_suspend": lambda m, d: members.member_suspend(member=m, reason="abuse", actor=None),
        "member_move": lambda m, d: members.member_move(
            member=m, room=RoomFactory(building=m.room.building), actor=None
        ),
        "member_end": lambda m, d: members.member_end(member=m, actor=None),
    }


@pytest.mark.parametrize("name", list(_writes()))
def test_each_write_service_calls_the_hook_once_after_commit(
    name, hook, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
        device = add(member)
    hook.reset_mock()
    with django_capture_on_commit_callbacks(execute=True):
        _writes()[name](member, device)
    assert hook.call_count == 1
    assert hook.call_args.kwargs["cause"]


@pytest.mark.parametrize("name", ["check_in", "test_access"])
def test_activation_calls_the_hook_once(name, hook, django_capture_on_commit_callbacks):
    import datetime as dt

    from django.utils import timezone

    pool_create()
    member = MemberFactory()
    with django_capture_on_commit_callbacks(execute=True):
        if name == "check_in":
            members.member_check_in(member=member, actor=None)
        else:
            testaccess.member_test_access_grant(
                member=member, until=timezone.localdate() + dt.timedelta(days=7), actor=None
            )
    assert hook.call_count == 1


def test_several_services_in_one_transaction_call_it_once_with_every_cause(
    hook, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
    hook.reset_mock()
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        d = network.device_add(member=member, name="a", mac="02:aa:00:00:00:01", actor=None)
        network.device_add(member=member, name="b", mac="02:aa:00:00:00:02", actor=None)
        network.device_remove(device=d, actor=None)
    assert hook.call_count == 1
    cause = hook.call_args.kwargs["cause"]
    assert cause.count("device.add") == 2
    assert "device.remove" in cause


def test_rollback_and_refusals_never_call_it(hook, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
    hook.reset_mock()
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
            network.device_add(member=member, name="a", mac="02:aa:00:00:00:01", actor=None)
            raise RuntimeError("boom")
        with pytest.raises(errors.NoSubnet):
            members.member_move(
                member=member,
                room=RoomFactory(building=BuildingFactory(subnets=(None, None))),
                actor=None,
            )
        add(member, mac="02:aa:00:00:00:05")
        with pytest.raises(errors.MacInUse):
            network.device_add(member=member, name="dup", mac="02:aa:00:00:00:05", actor=None)
    # Only the successful add above reached it (the test's own transaction never commits, so
    # the refusals could only have joined that one call, not added one).
    assert hook.call_count == 1


def test_register_is_not_a_network_change(hook, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        members.member_register(
            first_name="A", last_name="B", email="ab@example.org", room=RoomFactory(), actor=None
        )
    assert hook.call_count == 0


def test_the_hook_records_the_cause_for_every_site(django_capture_on_commit_callbacks):
    from apps.firewall.models import FirewallHost, Site
    from apps.firewall.pipeline import firewall_causes_take

    north = FirewallHost.objects.create(name="north-fw", address="10.255.255.11")
    south = FirewallHost.objects.create(
        name="south-fw", address="10.255.255.12", site=Site.objects.create(name="south")
    )
    for host in (north, south):
        firewall_causes_take(host.site_id)
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
    with django_capture_on_commit_callbacks(execute=True):
        add(member)
    for host in (north, south):
        causes, _requests = firewall_causes_take(host.site_id)
        assert [c for c in causes if c.startswith("device.add")], causes
        assert all(c.endswith("(by system)") for c in causes)
