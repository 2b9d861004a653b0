"""Firewall hosts are a list of sites: each host carries only the buildings it serves."""

from __future__ import annotations

import ipaddress
import re

import pytest

from apps.firewall.compiled import ruleset_compile
from apps.firewall.live import live_attach
from apps.firewall.models import FirewallHost, Site
from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
from apps.network.models import Ipv6Opening, PortForward
from tests.factories import (
    READ_BACK,
    BuildingFactory,
    RoomFactory,
    device_add,
    forward_add,
    member_active,
    opening_add,
)
from workers.ruleset import compile_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_sites():
    north, south = BuildingFactory(), BuildingFactory()
    sites = {"north": Site.objects.create(name="north"), "south": Site.objects.create(name="south")}
    sites["north"].buildings.set([north])
    sites["south"].buildings.set([south])
    hosts = {
        "north": FirewallHost.objects.create(
            name="north-fw", address="10.255.255.11", site=sites["north"]
        ),
        "south": FirewallHost.objects.create(
            name="south-fw", address="10.255.255.12", rollout_order=1, site=sites["south"]
        ),
        "core": FirewallHost.objects.create(
            name="core-fw", address="10.255.255.13", rollout_order=2
        ),
    }
    alice = member_active(room=RoomFactory(building=north))
    bob = member_active(room=RoomFactory(building=south))
    return hosts, north, south, alice, bob


def test_each_site_compiles_only_its_members_and_subnets(two_sites):
    hosts, north, _south, alice, bob = two_sites
    forward_add(alice, device_add(alice), "8080")
    forward_add(bob, device_add(bob), "8080")
    data = snapshot_data_read()

    north_snapshot = firewall_snapshot_build(host=hosts["north"], data=data)
    assert [m.id for m in north_snapshot.members] == [alice.id]
    north_subnet = ipaddress.ip_network(north.subnets.get(family=4).network)
    assert north_snapshot.host.private_networks == (north_subnet,)

    south_snapshot = firewall_snapshot_build(host=hosts["south"], data=data)
    assert [m.id for m in south_snapshot.members] == [bob.id]

    core = firewall_snapshot_build(host=hosts["core"], data=data)  # no buildings: everything
    assert {m.id for m in core.members} == {alice.id, bob.id}

    versions = {v.host.name: v.nft_text for v in ruleset_compile(cause="sites")}
    a, b = alice.public_ipv4.address, bob.public_ipv4.address
    assert carries(versions["north-fw"], a)
    assert not carries(versions["north-fw"], b)
    assert carries(versions["south-fw"], b)
    assert not carries(versions["south-fw"], a)
    assert carries(versions["core-fw"], a)
    assert carries(versions["core-fw"], b)


def carries(nft_text, address):
    """The address appears in the rule set as a whole address (not a prefix of another)."""
    return re.search(rf"(?<![\d.]){re.escape(address)}(?![\d])", nft_text) is not None


def test_a_row_waits_only_for_the_hosts_of_its_site(two_sites):
    hosts, _north, _south, alice, _bob = two_sites
    forward = forward_add(alice, device_add(alice), "2222")
    for version in ruleset_compile(cause="sites"):
        if version.host.name == "north-fw":
            version.host.mark_applied(version, digest=READ_BACK)
            version.host.push_log.create(version=version, step="confirm", ok=True)
    row = PortForward.objects.get(pk=forward.pk)
    assert live_attach([row]) is True  # core-fw (every building) has not confirmed yet
    assert [h["host"] for h in row.live["per_host"]] == ["north-fw", "core-fw"]
    assert row.live["hosts"] == ["north-fw"]

    opening = Ipv6Opening.objects.get(pk=opening_add(forward.device, "443").pk)
    live_attach([opening])  # an opening finds its site through its device
    assert [h["host"] for h in opening.live["per_host"]] == ["north-fw", "core-fw"]

    hosts["core"].enabled = False
    hosts["core"].save()
    row = PortForward.objects.get(pk=forward.pk)
    assert live_attach([row]) is False
    assert row.live["state"] == "live"
    assert row.live["hosts"] == ["north-fw"]  # south-fw never carries north's members


@pytest.mark.django_db(transaction=True)  # the hook runs when the admin's transaction commits
def test_changing_a_sites_buildings_in_the_admin_requests_a_compile(
    client, two_sites, firewall_redis_clean
):
    from apps.firewall.pipeline import firewall_causes_take
    from tests.factories import UserFactory

    hosts, north, south, _alice, _bob = two_sites
    admin = UserFactory(roles=["admin"], is_staff=True, is_superuser=True)
    client.force_login(admin)
    site = hosts["north"].site
    # A building served by another site is refused: two sites would NAT the same members.
    url = f"/admin/firewall/site/{site.pk}/change/"
    response = client.post(url, {"name": site.name, "buildings": [north.pk, south.pk]})
    assert response.status_code == 200
    assert f"{south} is already served by site south." in response.content.decode()
    assert set(site.buildings.values_list("pk", flat=True)) == {north.pk}
    south_site = hosts["south"].site
    south_site.buildings.clear()
    response = client.post(url, {"name": site.name, "buildings": [north.pk, south.pk]})
    assert response.status_code == 302, response.content[:2000]
    assert set(site.buildings.values_list("pk", flat=True)) == {north.pk, south.pk}
    causes, _ = firewall_causes_take(site.pk)
    assert causes == [f"site north settings (by {admin.username})"]


@pytest.mark.django_db(transaction=True)  # the hook runs when the admin's transaction commits
def test_the_fast_path_is_a_site_setting_off_by_default_that_reaches_its_hosts_rule_sets(
    client, two_sites, firewall_redis_clean
):
    from apps.firewall.pipeline import firewall_causes_take
    from tests.factories import UserFactory

    hosts, north, _south, _alice, _bob = two_sites
    site = hosts["north"].site
    assert site.fast_path is False
    off = compile_snapshot(firewall_snapshot_build(host=hosts["north"])).nft
    assert "flowtable" not in off
    admin = UserFactory(roles=["admin"], is_staff=True, is_superuser=True)
    client.force_login(admin)
    response = client.post(
        f"/admin/firewall/site/{site.pk}/change/",
        {"name": site.name, "buildings": [north.pk], "fast_path": "on"},
    )
    assert response.status_code == 302, response.content[:2000]
    site.refresh_from_db()
    assert site.fast_path is True
    causes, _ = firewall_causes_take(site.pk)
    assert causes == [f"site north settings (by {admin.username})"]
    on = compile_snapshot(firewall_snapshot_build(host=FirewallHost.objects.get(name="north-fw")))
    assert "flowtable fastpath" in on.nft
    assert "flow add @fastpath" in on.nft
    # The other site's hosts keep the slow path.
    south = compile_snapshot(firewall_snapshot_build(host=hosts["south"])).nft
    assert "flowtable" not in south
    # Staff see it beside the host's site on the hosts page.
    page = client.get("/firewalls/").content.decode()
    assert "fast path for established flows on" in page
