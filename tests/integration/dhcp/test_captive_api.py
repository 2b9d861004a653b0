"""The captive-portal API (RFC 8908): what a device's OS asks before it shows a sign-in."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from apps.dhcp.models import DhcpSettings, Lease, RegistrationRange
from apps.firewall.models import FirewallHost
from tests.factories import device_add, member_active
from tests.integration.dhcp.conftest import MAC, WALLED

pytestmark = pytest.mark.django_db

API = "/api/captive-portal/"
CAPTIVE_URL = "https://portal.dorm.example.org/api/captive-portal/"


@pytest.fixture
def garden(garden):
    """The walled device of conftest, with a captive-portal URL configured."""
    settings_row = DhcpSettings.load()
    settings_row.captive_portal_url = CAPTIVE_URL
    settings_row.save(update_fields=["captive_portal_url"])
    return garden


def ask(client, address=WALLED, **kw):
    """The OS's request as the portal's proxy (loopback, trusted) passes it on."""
    return client.get(
        API,
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=address,
        HTTP_ACCEPT="application/captive+json",
        **kw,
    )


def test_a_walled_device_is_told_it_is_captive_and_where_to_sign_in(client, garden):
    response = ask(client)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/captive+json"
    assert response["Cache-Control"] == "private, no-store"
    assert json.loads(response.content) == {
        "captive": True,
        "user-portal-url": "https://portal.dorm.example.org/unregistered/",
    }
    # The page it names is the one that shows this device's MAC.
    page = client.get("/unregistered/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=WALLED)
    assert MAC in page.content.decode()


def test_no_sign_in_is_needed_and_the_walled_garden_does_not_redirect_it(client, garden):
    response = ask(client)
    assert response.status_code == 200  # not the 302 every other path gets from the range
    assert json.loads(response.content)["captive"] is True


def test_the_portal_url_comes_from_the_settings_never_from_the_host_header(client, garden):
    with override_settings(ALLOWED_HOSTS=["*"]):
        body = json.loads(ask(client, HTTP_HOST="evil.example").content)
    assert body["user-portal-url"] == "https://portal.dorm.example.org/unregistered/"


def test_a_device_on_its_reserved_address_is_not_captive(client, garden):
    device = device_add(garden, mac=MAC)  # registered; renewed onto its reservation
    body = json.loads(ask(client, address=str(device.ipv4)).content)
    assert body == {"captive": False}


def test_registered_but_not_yet_renewed_is_still_captive(client, garden):
    """The firewall walls the registration address until the device renews onto its reserved
    address; the API says what the firewall does, so the OS keeps its sign-in window open."""
    device_add(garden, mac=MAC)
    assert Lease.objects.filter(address=WALLED, mac=MAC).exists()
    assert json.loads(ask(client).content)["captive"] is True


def test_forged_forwarded_for_from_an_untrusted_peer_is_ignored(client, garden):
    response = client.get(API, REMOTE_ADDR="192.0.2.5", HTTP_X_FORWARDED_FOR=WALLED)
    assert json.loads(response.content) == {"captive": False}


@override_settings(PORTAL_THROTTLE_RATES={"captive_api": "3/m"})
def test_one_client_asking_in_a_loop_is_limited_and_another_is_not(client, garden):
    codes = [ask(client).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    limited = ask(client)
    assert int(limited["Retry-After"]) >= 1
    assert ask(client, address="10.100.250.18").status_code == 200


def test_without_a_configured_url_the_page_is_named_on_the_host_asked(client, garden):
    DhcpSettings.objects.filter(id=1).update(captive_portal_url="")
    body = json.loads(ask(client, HTTP_HOST="localhost").content)
    assert body == {"captive": True, "user-portal-url": "http://localhost/unregistered/"}


def test_a_post_is_refused_and_changes_nothing(client, garden):
    response = client.post(API, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=WALLED)
    assert response.status_code == 405


def test_the_setting_reaches_kea_and_the_rule_set_with_the_next_compile():
    from apps.firewall.compiled import ruleset_compile
    from apps.firewall.models import Site

    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)
    Site.objects.filter(pk=host.site_id).update(member_network4="10.0.0.0/8")
    member = member_active()
    RegistrationRange.objects.create(building=member.room.building, network="10.100.250.0/24")
    settings_row = DhcpSettings.load()
    settings_row.portal_addresses = "203.0.113.80"
    settings_row.save()
    (before,) = ruleset_compile(cause="test")
    pools = json.loads(before.files["kea-dhcp4"])["Dhcp4"]["subnet4"][0]["pools"]
    assert pools
    assert all("option-data" not in p for p in pools)
    assert "dnat ip to 203.0.113.80" not in before.nft_text

    settings_row.captive_portal_url = CAPTIVE_URL
    settings_row.save()
    (after,) = ruleset_compile(cause="test")
    pools = json.loads(after.files["kea-dhcp4"])["Dhcp4"]["subnet4"][0]["pools"]
    assert all(
        p["option-data"] == [{"name": "v4-captive-portal", "data": CAPTIVE_URL}] for p in pools
    )
    assert "ip saddr @reg4 ip daddr != @walled4 dnat ip to 203.0.113.80" in after.nft_text


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://portal.example.org/api/captive-portal/", "https://"),
        ("https://203.0.113.80/api/captive-portal/", "not a domain name"),
        ('https://portal.example.org/"injected', "cannot have"),
    ],
)
def test_the_admin_refuses_a_url_kea_would_not_get(url, message):
    from django.core.exceptions import ValidationError

    row = DhcpSettings.load()
    row.captive_portal_url = url
    with pytest.raises(ValidationError, match=message):
        row.full_clean()
    assert DhcpSettings.objects.get(id=1).captive_portal_url == ""
