"""The worker reuses the DHCP part of a host's bundle while no reservation changes (a forward
changes nothing in Kea's configuration), and builds it again as soon as one does."""

from __future__ import annotations

import json

import pytest

from apps.firewall.compiled import ruleset_compile
from apps.firewall.models import FirewallHost, Site
from apps.network.services import device_remove
from tests.factories import device_add, forward_add, member_active

pytestmark = pytest.mark.django_db


def kea(version) -> dict[str, str]:
    config = json.loads(version.files["kea-dhcp4"])
    reservations = config["Dhcp4"]["subnet4"][0]["reservations"]
    return {r["hw-address"]: r["ip-address"] for r in reservations}


def test_a_reservation_appears_and_goes_with_its_device_and_a_forward_leaves_kea_alone():
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)
    Site.objects.filter(pk=host.site_id).update(member_network4="10.0.0.0/8")
    member = member_active()
    first = device_add(member)
    (v1,) = ruleset_compile(cause="test")
    assert kea(v1) == {first.mac: first.ipv4}

    forward_add(member, device=first, ports="8080")
    (v2,) = ruleset_compile(cause="test")
    assert v2.content_hash != v1.content_hash  # the rule set changed...
    assert v2.artefact_hashes["kea-dhcp4"] == v1.artefact_hashes["kea-dhcp4"]  # ...Kea did not

    second = device_add(member)
    (v3,) = ruleset_compile(cause="test")
    assert kea(v3) == {first.mac: first.ipv4, second.mac: second.ipv4}

    device_remove(device=second, actor=None)
    (v4,) = ruleset_compile(cause="test")
    assert kea(v4) == {first.mac: first.ipv4}
