"""Policy and shaping profiles in the Django admin: written through the services, audited, and
recompiled (network hook) when they shape the rule set."""

from unittest import mock

import pytest
from django.test import Client

from apps.audit.models import AuditEntry
from apps.network.models import BlockedPort, ManagementNetwork, NetworkSettings, ShapingProfile
from tests.factories import member_on_test

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(make_user):
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    return client


def test_defaults_block_outbound_smtp_and_have_a_default_profile():
    assert BlockedPort.objects.filter(direction="outbound", protocol="tcp", first=25).exists()
    assert ShapingProfile.default().is_default
    settings = NetworkSettings.load()
    assert (settings.port_forward_limit, settings.test_access_notice_days) == (20, 3)


def test_blocked_range_through_the_admin_is_audited_and_recompiles(
    admin_client, django_capture_on_commit_callbacks
):
    with (
        mock.patch("apps.network.hooks.network_changed") as hook,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = admin_client.post(
            "/admin/network/blockedport/add/",
            {"direction": "inbound", "protocol": "tcp", "first": 135, "last": 139, "note": "SMB"},
        )
    assert response.status_code == 302, response.content.decode()[:2000]
    blocked = BlockedPort.objects.get(first=135)
    assert AuditEntry.objects.filter(action="blockedport.create", object_id=str(blocked.pk))
    assert hook.call_count == 1
    reversed_range = admin_client.post(
        "/admin/network/blockedport/add/",
        {"direction": "inbound", "protocol": "tcp", "first": 200, "last": 100},
    )
    assert reversed_range.status_code == 200
    assert "reversed" in reversed_range.content.decode()
    admin_client.post(f"/admin/network/blockedport/{blocked.pk}/delete/", {"post": "yes"})
    assert not BlockedPort.objects.filter(first=135).exists()
    assert AuditEntry.objects.filter(action="blockedport.delete").exists()


def test_management_network_and_profile_changes_are_audited(admin_client):
    admin_client.post(
        "/admin/network/managementnetwork/add/", {"network": "10.255.255.0/24", "note": "lab"}
    )
    assert ManagementNetwork.objects.filter(network="10.255.255.0/24").exists()
    member = member_on_test()
    profile = member.test_access.profile
    response = admin_client.post(
        f"/admin/network/shapingprofile/{profile.pk}/change/",
        {"name": profile.name, "down_kbit": 6000, "up_kbit": 1500, "is_default": "on"},
    )
    assert response.status_code == 302
    profile.refresh_from_db()
    assert profile.down_kbit == 6000
    entry = AuditEntry.objects.get(action="shapingprofile.change")
    assert entry.changes["down_kbit"] == [4000, 6000]
    # In use: it cannot be deleted.
    assert (
        admin_client.get(f"/admin/network/shapingprofile/{profile.pk}/delete/").status_code == 403
    )


def test_settings_page_lists_the_limits(admin_client):
    body = admin_client.get("/admin/network/networksettings/1/change/").content.decode()
    assert "port_forward_limit" in body
    assert "test_access_notice_days" in body
