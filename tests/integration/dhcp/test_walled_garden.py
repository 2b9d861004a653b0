"""The walled garden in the portal, and the lease history it reads the MAC from."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.dhcp.models import Lease
from apps.dhcp.services import LeaseRow, lease_rows_parse, leases_store
from apps.firewall.models import FirewallHost
from apps.network.models import Device
from tests.factories import device_add, member_active
from tests.integration.dhcp.conftest import MAC, WALLED

pytestmark = pytest.mark.django_db


def via_proxy(client, path, address=WALLED, **kw):
    """A request as the lab's proxy (loopback, trusted) passes it on for `address`."""
    return client.get(path, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=address, **kw)


def test_an_unregistered_device_sees_only_the_not_registered_page_with_its_mac(client, garden):
    response = via_proxy(client, "/")
    assert response.status_code == 302
    assert response["Location"] == "/unregistered/"
    for path in ("/devices/", "/tickets/", "/api/devices/"):
        assert via_proxy(client, path)["Location"] == "/unregistered/"
    page = via_proxy(client, "/unregistered/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "This device is not registered" in text
    assert MAC in text
    assert WALLED in text
    assert "Sign in to register this device" in text
    assert via_proxy(client, "/accounts/login/").status_code == 200  # signing in stays possible


def test_it_reads_german_too(client, garden):
    page = via_proxy(client, "/unregistered/", HTTP_ACCEPT_LANGUAGE="de")
    assert "Dieses Gerät ist nicht registriert" in page.content.decode()


def test_other_clients_and_forged_headers_are_not_walled(client, garden):
    assert via_proxy(client, "/", address="198.51.100.9").status_code != 302 or (
        via_proxy(client, "/", address="198.51.100.9")["Location"] != "/unregistered/"
    )
    # An untrusted peer claiming a registration address through the header is its own address.
    response = client.get("/accounts/login/", REMOTE_ADDR="192.0.2.5", HTTP_X_FORWARDED_FOR=WALLED)
    assert response.status_code == 200
    response = client.get("/", REMOTE_ADDR="192.0.2.5", HTTP_X_FORWARDED_FOR=WALLED)
    assert response.get("Location") != "/unregistered/"


def test_a_signed_in_member_registers_the_device_with_the_mac_from_the_lease(client, garden):
    member = garden
    client.force_login(member.user)
    page = via_proxy(client, "/unregistered/")
    text = page.content.decode()
    assert f'value="{MAC}"' in text
    assert "readonly" in text
    response = client.post(
        "/unregistered/",
        {"name": "laptop", "mac": MAC},
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=WALLED,
        follow=True,
    )
    device = Device.objects.get(mac=MAC)
    assert device.member == member
    assert device.name == "laptop"
    text = response.content.decode()
    assert f"is registered with {device.ipv4}" in text
    assert "This device is registered as “laptop”" in text  # the page now says so
    assert "<h1>This device is registered</h1>" in text
    assert "not registered" not in text  # neither the heading nor the title contradicts it
    assert AuditEntry.objects.filter(action="device.add", object_id=str(device.pk)).exists()


def test_registering_refuses_a_taken_mac_plainly_and_changes_nothing(client, garden):
    other = member_active()
    device_add(other, "tv", mac="02:aa:bb:cc:dd:99")
    client.force_login(garden.user)
    response = client.post(
        "/unregistered/",
        {"name": "laptop", "mac": "02:aa:bb:cc:dd:99"},
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=WALLED,
    )
    assert response.status_code == 400
    assert "field-error" in response.content.decode()
    assert not Device.objects.filter(member=garden).exists()


def test_a_staff_account_without_membership_cannot_register_here(client, garden, django_user_model):
    staff = django_user_model.objects.create_user("desk", password="x")
    client.force_login(staff)
    response = client.post(
        "/unregistered/",
        {"name": "laptop", "mac": MAC},
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=WALLED,
        follow=True,
    )
    assert "Sign in as the member whose device this is." in response.content.decode()
    assert not Device.objects.filter(mac=MAC).exists()


# --- the lease history ---------------------------------------------------------------------


def test_a_renewed_lease_extends_its_row_and_a_new_address_starts_a_new_one():
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)
    t0 = timezone.now().replace(microsecond=0)
    lease = dt.timedelta(seconds=600)
    leases_store(host=host, rows=[LeaseRow("10.100.1.5", MAC, t0, t0 + lease, "pc")])
    leases_store(host=host, rows=[LeaseRow("10.100.1.5", MAC, t0 + dt.timedelta(seconds=300),
                                           t0 + dt.timedelta(seconds=900), "pc")])  # fmt: skip
    rows = list(Lease.objects.order_by("starts").values_list("address", "starts", "ends"))
    assert rows == [("10.100.1.5", t0, t0 + dt.timedelta(seconds=900))]
    # Moved: a new address is a new row; the old one keeps its end.
    t1 = t0 + dt.timedelta(seconds=1000)
    leases_store(host=host, rows=[LeaseRow("10.100.2.5", MAC, t1, t1 + lease, "pc")])
    rows = list(Lease.objects.order_by("starts").values_list("address", "starts", "ends"))
    assert rows == [
        ("10.100.1.5", t0, t0 + dt.timedelta(seconds=900)),
        ("10.100.2.5", t1, t1 + lease),
    ]
    # The same address again long after it ran out is a new holding, not a continuation.
    t2 = t1 + dt.timedelta(hours=5)
    leases_store(host=host, rows=[LeaseRow("10.100.2.5", MAC, t2, t2 + lease, "pc")])
    assert Lease.objects.filter(address="10.100.2.5").count() == 2


def test_rows_a_host_sends_are_validated_and_the_bad_ones_skipped():
    now = int(timezone.now().timestamp())
    rows, skipped = lease_rows_parse(
        [
            ["10.100.1.5", "02:00:00:00:00:05", now, 600, "pc", 0],
            ["10.100.1.6", "not-a-mac", now, 600, "", 0],
            ["'; DROP TABLE", "02:00:00:00:00:06", now, 600, "", 0],
            ["10.100.1.7", "02:00:00:00:00:07", "yesterday", 600, "", 0],
            ["10.100.1.8", "02:00:00:00:00:08", now, 600, "", 1],  # declined
            ["10.100.1.9"],
            "junk",
        ]
    )
    assert [(r.address, r.mac) for r in rows] == [("10.100.1.5", "02:00:00:00:00:05")]
    assert skipped == 6
    assert lease_rows_parse({"not": "a list"}) == ([], 0)


def test_an_address_without_a_known_lease_is_answered_from_the_history_without_reading_hosts(
    client, garden, monkeypatch
):
    """N2: a device with a static address in the range never makes the request read the hosts
    (an SSH round per anonymous request); the page says the lease has not been seen yet."""
    import apps.dhcp.services

    def no_ssh_from_a_request(*args, **kwargs):
        raise AssertionError("a request read the hosts' leases")

    monkeypatch.setattr(apps.dhcp.services, "leases_collect", no_ssh_from_a_request)
    page = via_proxy(client, "/unregistered/", address="10.100.250.99")
    assert page.status_code == 200
    text = page.content.decode()
    assert "We have not seen this device's lease yet" in text
    assert 'data-testid="lease-unseen"' in text
    german = via_proxy(
        client, "/unregistered/", address="10.100.250.99", HTTP_ACCEPT_LANGUAGE="de"
    ).content.decode()
    assert "Wir haben die Lease dieses Geräts noch nicht gesehen" in german
    known = via_proxy(client, "/unregistered/").content.decode()  # the collector saw this one
    assert MAC in known
    assert 'data-testid="lease-unseen"' not in known
