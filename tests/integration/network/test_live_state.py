"""Every forward and opening shows whether the firewalls enforce it: API field and the badge
that polls while it is pending (only for the owner and staff)."""

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.firewall.models import FirewallHost
from tests.factories import (
    READ_BACK,
    confirm_everywhere,
    forward_add,
    member_active,
    opening_add,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def hosts():
    return [
        FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11"),
        FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1),
    ]


def test_api_shows_pending_then_live_on_both_hosts(hosts):
    member = member_active()
    forward = forward_add(member, ports="8080")
    client = APIClient()
    client.force_authenticate(member.user)
    body = client.get(f"/api/port-forwards/{forward.pk}/").json()
    assert body["live"]["state"] == "pending"
    assert [h["state"] for h in body["live"]["hosts"]] == ["pending", "pending"]
    confirm_everywhere(forward.updated_at)
    listed = client.get("/api/port-forwards/").json()["results"][0]
    assert listed["live"]["state"] == "live"
    assert [h["host"] for h in listed["live"]["hosts"]] == ["pl-nat1", "pl-nat2"]
    assert listed["live"]["since"]


def test_disabled_rules_have_no_live_state(hosts):
    member = member_active()
    forward = forward_add(member, ports="8081", enabled=False)
    client = APIClient()
    client.force_authenticate(member.user)
    assert client.get(f"/api/port-forwards/{forward.pk}/").json()["live"] is None


def test_badge_polls_while_pending_and_stops_when_live(client, hosts):
    member = member_active()
    forward = forward_add(member, ports="8082")
    opening = opening_add(forward.device)
    client.force_login(member.user)
    url = reverse("network:live_state", args=["forward", forward.pk])
    pending = client.get(url).content.decode()
    assert 'data-state="pending"' in pending
    assert 'hx-trigger="every 500ms"' in pending  # fast while something is pending
    confirm_everywhere(timezone.now())
    live = client.get(url).content.decode()
    assert 'data-state="live"' in live
    assert (
        "live on pl-nat1 &amp; pl-nat2 since" in live or "live on pl-nat1 & pl-nat2 since" in live
    )
    assert "hx-trigger" not in live
    badge = client.get(reverse("network:live_state", args=["opening", opening.pk]))
    assert 'data-state="live"' in badge.content.decode()  # carried by the same versions


def test_a_suspended_members_forwards_stay_enabled_but_are_never_live(client, hosts):
    from apps.members.services import member_suspend

    member = member_active()
    forward = forward_add(member, ports="8084")
    opening = opening_add(forward.device)
    member_suspend(member=member, reason="unpaid", actor=None)
    confirm_everywhere(timezone.now())  # versions newer than every change: still not carried
    forward.refresh_from_db()
    assert forward.enabled
    client.force_login(member.user)
    for kind, row in (("forward", forward), ("opening", opening)):
        badge = client.get(reverse("network:live_state", args=[kind, row.pk])).content.decode()
        assert 'data-state="off"' in badge
        assert "not in force: the membership is not active" in badge
        assert "hx-trigger" not in badge  # settled: nothing to wait for
    api = APIClient()
    api.force_authenticate(member.user)
    live = api.get(f"/api/port-forwards/{forward.pk}/").json()["live"]
    assert live is None or live["state"] == "off"


def test_a_host_whose_content_drifted_is_not_live_until_repaired(client, hosts):
    from apps.health.services import host_digest_compare

    member = member_active()
    forward = forward_add(member, ports="8085")
    confirm_everywhere(timezone.now())
    client.force_login(member.user)
    url = reverse("network:live_state", args=["forward", forward.pk])
    assert 'data-state="live"' in client.get(url).content.decode()
    nat1 = hosts[0]
    nat1.refresh_from_db()
    drifted = {"total": "1" * 64, "parts": {"nft:chain forward": "1" * 64}}
    assert host_digest_compare(host=nat1, digest=drifted) == ["nft:chain forward"]
    badge = client.get(url).content.decode()
    assert 'data-state="pending"' in badge
    assert "live on pl-nat2" in badge
    assert host_digest_compare(host=nat1, digest=READ_BACK) == []  # repaired: matches again
    assert 'data-state="live"' in client.get(url).content.decode()


def test_badge_of_someone_elses_rule_is_404(client, hosts):
    owner, other = member_active(), member_active()
    forward = forward_add(owner, ports="8083")
    client.force_login(other.user)
    url = reverse("network:live_state", args=["forward", forward.pk])
    assert client.get(url).status_code == 404
    assert (
        client.get(reverse("network:live_state", args=["nonsense", forward.pk])).status_code == 404
    )


def test_failed_push_shows_the_reason(hosts):
    member = member_active()
    forward = forward_add(member, ports="8084")
    hosts[0].mark_error("check: the host refused the rule set: Error: syntax error")
    client = APIClient()
    client.force_authenticate(member.user)
    live = client.get(f"/api/port-forwards/{forward.pk}/").json()["live"]
    assert live["state"] == "failed"
    assert "pl-nat1: check: the host refused" in live["reason"]


def test_devices_show_pending_then_live_on_the_dashboard_and_in_the_api(client, hosts):
    from tests.factories import device_add

    member = member_active()
    laptop = device_add(member, "laptop")
    client.force_login(member.user)
    page = client.get(reverse("members:dashboard")).content.decode()
    assert f'id="live-device-{laptop.pk}" data-state="pending"' in page
    api = APIClient()
    api.force_authenticate(member.user)
    assert api.get(f"/api/devices/{laptop.pk}/").json()["live"]["state"] == "pending"

    confirm_everywhere(laptop.updated_at)
    page = client.get(reverse("members:dashboard")).content.decode()
    assert f'id="live-device-{laptop.pk}" data-state="live"' in page
    (listed,) = api.get("/api/devices/").json()["results"]
    assert listed["live"]["state"] == "live"
    badge = client.get(reverse("network:live_state", args=["device", laptop.pk]))
    assert 'data-state="live"' in badge.content.decode()


def test_devices_of_a_member_off_the_network_have_no_live_state(client, hosts):
    from apps.members.services import member_suspend
    from tests.factories import device_add

    member = member_active()
    device = device_add(member)
    member_suspend(member=member, reason="unpaid", actor=None)
    api = APIClient()
    api.force_authenticate(member.user)
    assert api.get(f"/api/devices/{device.pk}/").json()["live"] is None
    other = member_active()
    client.force_login(other.user)
    assert client.get(reverse("network:live_state", args=["device", device.pk])).status_code == 404
