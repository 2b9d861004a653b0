"""seed_demo: deterministic, idempotent, growing, refused without DEBUG."""

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db
User = get_user_model()


def people():
    return list(
        User.objects.order_by("username").values_list(
            "username", "first_name", "last_name", "password"
        )
    )


@pytest.fixture
def debug_on(settings):
    settings.DEBUG = True


def test_demo_logins_exist_with_their_roles(debug_on, rf):
    call_command("seed_demo", members=3, seed=7)
    for name, role in [
        ("resident", "member"),
        ("volunteer", "volunteer"),
        ("support", "support"),
        ("admin", "admin"),
    ]:
        user = authenticate(rf.post("/"), username=name, password="demo")
        assert user is not None, name
        assert list(user.groups.values_list("name", flat=True)) == [role]
    assert User.objects.get(username="admin").is_superuser
    assert User.objects.filter(username__startswith="member").count() == 3


def test_the_demo_has_canned_responses_support_can_pick(debug_on):
    from apps.tickets.models import CannedResponse

    call_command("seed_demo", members=1, seed=7)
    titles = set(CannedResponse.objects.values_list("title", flat=True))
    assert {"Restart the router", "Register the device", "Known outage"} <= titles
    call_command("seed_demo", members=1, seed=7)
    assert CannedResponse.objects.count() == len(titles)


def test_running_again_changes_nothing(debug_on):
    call_command("seed_demo", members=5, seed=7)
    before = people()
    call_command("seed_demo", members=5, seed=7)
    assert people() == before


def test_a_larger_count_adds_only_the_missing_members(debug_on):
    call_command("seed_demo", members=5, seed=7)
    before = people()
    call_command("seed_demo", members=8, seed=7)
    after = people()
    assert len(after) == len(before) + 3
    assert set(before) <= set(after)


def test_same_seed_gives_the_same_people(debug_on):
    call_command("seed_demo", members=10, seed=3)
    first = [(u, f, last) for u, f, last, _ in people()]
    first_network = network_state()
    wipe()
    call_command("seed_demo", members=10, seed=3)
    assert [(u, f, last) for u, f, last, _ in people()] == first
    assert network_state() == first_network


def test_refused_without_debug_unless_forced(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG is off"):
        call_command("seed_demo", members=1)
    assert not User.objects.exists()
    call_command("seed_demo", members=1, force=True)
    assert User.objects.filter(username="resident").exists()


def test_negative_count_is_refused(debug_on):
    with pytest.raises(CommandError, match="--members"):
        call_command("seed_demo", members=-1)


def network_state():
    from apps.members.models import Member
    from apps.network.models import Device, PublicAddress

    return (
        list(
            Member.objects.order_by("user__username").values_list(
                "user__username", "status", "room__label"
            )
        ),
        list(
            Device.objects.order_by("mac").values_list(
                "member__user__username", "name", "mac", "ipv4", "ipv6"
            )
        ),
        list(
            PublicAddress.objects.order_by("address").values_list(
                "address", "member__user__username"
            )
        ),
    )


def test_members_have_rooms_statuses_devices_and_addresses(debug_on):
    from apps.members.choices import MemberStatus
    from apps.members.models import Member
    from apps.network.models import Device

    call_command("seed_demo", members=120, seed=5)
    statuses = set(Member.objects.values_list("status", flat=True))
    assert statuses == set(MemberStatus.values)
    devices = Device.objects.count()
    assert 2.5 <= devices / Member.objects.count() <= 3.5
    resident = Member.objects.get(user__username="resident")
    assert resident.status == "active"
    assert resident.public_ipv4
    assert resident.devices.count() == 2
    # Every active member holds exactly one public address; ended members none.
    assert not Member.objects.filter(status="active", public_ipv4__isnull=True).exists()
    assert not Member.objects.filter(status="ended", public_ipv4__isnull=False).exists()


def test_network_data_is_deterministic_and_idempotent(debug_on):
    from apps.members.models import Building

    call_command("seed_demo", members=30, seed=9)
    first = network_state()
    call_command("seed_demo", members=30, seed=9)
    assert network_state() == first
    assert Building.objects.count() == 2


def wipe():
    from apps.members.models import Building, Member, Room
    from apps.network.models import Device, PublicAddress, PublicPool, Subnet

    for model in (Device, PublicAddress, PublicPool, Member, Room, Subnet, Building):
        model.objects.all().delete()
    User.objects.all().delete()


def test_layout_for_100k_members_fits_its_ranges():
    """Above 62,500 members: 500 rooms per building, each room's /64 inside its building's /48."""
    import ipaddress

    from apps.operations.management.commands.seed_demo import Layout

    layout = Layout.for_count(100_000)
    buildings = -(-100_000 // layout.rooms_per_building)
    assert layout.rooms_per_building == 500
    assert buildings <= 250
    pool = ipaddress.IPv4Network(layout.pool)
    assert pool.num_addresses - 2 >= 100_000
    prefixes = set()
    for b in (1, buildings):
        building = ipaddress.IPv6Network(layout.ipv6_prefix(b))
        assert ipaddress.IPv4Network(layout.ipv4_subnet(b)).subnet_of(
            ipaddress.IPv4Network("10.0.0.0/8")
        )
        for index in (1, layout.rooms_per_building):
            room = ipaddress.IPv6Network(layout.room_prefix(b, index))
            assert room.prefixlen == 64
            assert room.subnet_of(building)
            prefixes.add(room)
    assert len(prefixes) == 4
    with pytest.raises(CommandError, match="125,000"):
        Layout.for_count(125_001)


def test_a_different_room_layout_is_refused(debug_on, monkeypatch):
    """Growing across a layout boundary would misplace members: refused, not mixed."""
    from apps.operations.management.commands import seed_demo

    call_command("seed_demo", members=3, seed=7)
    small = seed_demo.Layout.for_count(3)
    monkeypatch.setattr(
        seed_demo.Layout,
        "for_count",
        classmethod(
            lambda cls, n: cls(
                rooms_per_building=small.rooms_per_building + 1, pool=small.pool, large=False
            )
        ),
    )
    with pytest.raises(CommandError, match="rooms"):
        call_command("seed_demo", members=4, seed=7)


def test_demo_members_dates_agree_with_their_status(debug_on):
    """A pending member's page says "registered" and "status since" on the same moment; an
    active or test member's status began at the check-in, an ended one's at the end."""
    from apps.members.choices import MemberStatus
    from apps.members.models import Member

    call_command("seed_demo", members=60, seed=5)
    members = list(Member.objects.all())
    by_status = {m.status for m in members}
    assert {MemberStatus.PENDING, MemberStatus.ACTIVE} <= by_status
    for m in members:
        if m.status == MemberStatus.PENDING:
            assert m.status_since == m.registered_at, m
        elif m.status == MemberStatus.ENDED:
            assert m.status_since == m.ended_at, m
        elif m.status in (MemberStatus.ACTIVE, MemberStatus.TEST) and m.checked_in_at:
            assert m.status_since == m.checked_in_at, m


def test_sites_split_the_buildings_each_with_its_pair_and_compiles_only_its_members(debug_on):
    """`--sites 3`: three sites over the buildings, each with its buildings' subnets and
    registration ranges, members, two (disabled) hosts; a host's snapshot holds exactly the
    members of its site's buildings."""
    from apps.dhcp.models import RegistrationRange
    from apps.firewall.models import FirewallHost, Site
    from apps.firewall.snapshot import firewall_snapshot_build, snapshot_cache_clear
    from apps.members.choices import MemberStatus
    from apps.members.models import Member
    from apps.network.models import Subnet

    call_command("seed_demo", members=130, sites=3, seed=7)
    sites = list(Site.objects.filter(name__startswith="demo-").order_by("name"))
    assert [s.name for s in sites] == ["demo-1", "demo-2", "demo-3"]
    served: list[set[int]] = []
    for site in sites:
        buildings = set(site.buildings.values_list("pk", flat=True))
        assert buildings
        served.append(buildings)
        assert Subnet.objects.filter(building__in=buildings).count() == 2 * len(buildings)
        assert RegistrationRange.objects.filter(building__in=buildings).count() == len(buildings)
        hosts = list(FirewallHost.objects.filter(site=site).order_by("name"))
        assert [h.name for h in hosts] == [f"{site.name}-fw1", f"{site.name}-fw2"]
        assert not any(h.enabled for h in hosts)
        live = set(
            Member.objects.filter(
                room__building__in=buildings, status__in=(MemberStatus.ACTIVE, MemberStatus.TEST)
            ).values_list("pk", flat=True)
        )
        assert live
        snapshot_cache_clear()
        compiled = {m.id for m in firewall_snapshot_build(host=hosts[0]).members}
        assert compiled
        assert compiled == live
    # The sites split the buildings: every one served, none twice.
    from apps.members.models import Building

    assert set().union(*served) == set(Building.objects.values_list("pk", flat=True))
    assert sum(len(b) for b in served) == len(set().union(*served))
    # Again: nothing new.
    call_command("seed_demo", members=130, sites=3, seed=7)
    assert Site.objects.filter(name__startswith="demo-").count() == 3
    assert FirewallHost.objects.filter(name__startswith="demo-").count() == 6


def test_sites_out_of_range_are_refused(debug_on):
    with pytest.raises(CommandError, match="--sites"):
        call_command("seed_demo", members=1, sites=-1)
