"""Personal data: a member downloads their own (page and API, nobody else's); a former member's
is erased after the retention period, except what the abuse history must keep."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.abuse.models import AddressHolding
from apps.audit.models import AuditEntry
from apps.members.models import Member
from apps.network.models import PublicPool
from apps.operations.retention import retention_run
from tests.factories import (
    PASSWORD,
    device_add,
    forward_add,
    member_active,
    member_registered,
    pool_create,
)

pytestmark = pytest.mark.django_db


def _member_with_data(first: str = "Ann", last: str = "Lee") -> Member:
    """An active member with a phone, a device, a forward, a ticket with a note, a notice."""
    from apps.members.services import member_check_in
    from apps.notifications.models import Notice
    from apps.tickets.services import ticket_note, ticket_open

    if not PublicPool.objects.exists():
        pool_create()
    member = member_registered(first_name=first, last_name=last)  # with a room stay
    Member.objects.filter(pk=member.pk).update(phone="+49 30 1234")
    member = member_check_in(member=Member.objects.get(pk=member.pk), actor=None)
    device = device_add(member, name=f"{first}-laptop")
    forward_add(member, device=device, ports="8080", description=f"{first}'s game server")
    ticket = ticket_open(actor=member.user, subject="No internet", body=f"{first} here, help")
    staff = member_active().user
    ticket_note(ticket=ticket, actor=staff, body="internal: call the caretaker")
    Notice.objects.create(member=member, kind="incident", params={})
    from apps.firewall.models import FirewallHost
    from apps.traffic.services import Row, traffic_store

    host = FirewallHost.objects.get_or_create(name="nat1", defaults={"address": "127.0.0.1"})[0]
    traffic_store(host=host, epoch="e", rows=[Row("acct4_in", str(device.ipv4), 3, 4096)])
    return member


def _client(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def test_member_downloads_own_data_from_their_page() -> None:
    member = _member_with_data()
    client = _client(member)
    page = client.get("/me/")
    assert b'href="/me/data.json"' in page.content

    response = client.get("/me/data.json")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="my-portal-data-')
    data = json.loads(response.content)
    assert data["account"]["email"] == member.user.email
    assert data["membership"]["phone"] == "+49 30 1234"
    assert [d["name"] for d in data["devices"]] == ["Ann-laptop"]
    assert data["port_forwards"][0]["description"] == "Ann's game server"
    assert data["public_ipv4"][0]["address"] == str(member.public_ipv4.address)
    texts = [m["text"] for t in data["tickets"] for m in t["messages"]]
    assert "Ann here, help" in texts
    assert not any("caretaker" in text for text in texts)  # staff's internal notes are not hers
    assert len(data["notices"]) == 1
    assert any(h["address"] == str(member.public_ipv4.address) for h in data["address_history"])
    assert [(t["bytes_in"], t["span"]) for t in data["traffic"]] == [(4096, "h")]
    assert AuditEntry.objects.filter(action="member.data_export", member=member).count() == 1


def test_the_download_is_offered_in_german() -> None:
    client = _client(_member_with_data())
    page = client.get("/me/", HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "Meine Daten herunterladen" in page
    assert "nach 180 Tagen gelöscht" in page


def test_login_without_membership_has_no_download(client_for: Any) -> None:
    assert client_for("support").get("/me/data.json").status_code == 404


def test_api_gives_a_member_their_own_data_only() -> None:
    ann, bob = _member_with_data(), _member_with_data("Bob", "Ray")
    api = APIClient()
    api.force_authenticate(ann.user)
    assert api.get(f"/api/members/{ann.pk}/data/").json()["account"]["email"] == ann.user.email
    assert api.get("/api/me/data/").json()["membership"]["id"] == ann.pk
    refused = api.get(f"/api/members/{bob.pk}/data/")
    assert refused.status_code == 404
    assert bob.user.email not in refused.content.decode()
    assert not AuditEntry.objects.filter(action="member.data_export", member=bob).exists()


def test_staff_cannot_download_a_members_data_through_the_api(make_user: Any) -> None:
    ann = _member_with_data()
    api = APIClient()
    api.force_authenticate(make_user(roles=("admin",)))
    assert api.get(f"/api/members/{ann.pk}/data/").status_code == 404


def _ended_days_ago(member: Member, days: int) -> Member:
    from apps.members.services import member_end

    member_end(member=member, actor=None)
    Member.objects.filter(pk=member.pk).update(ended_at=timezone.now() - dt.timedelta(days=days))
    member.refresh_from_db()
    return member


def test_former_member_is_erased_after_the_retention_keeping_the_abuse_history(
    settings: Any,
) -> None:
    from apps.notifications.models import Notice
    from apps.tickets.models import Message, Ticket

    settings.PORTAL_RETAIN_FORMER_MEMBERS_DAYS = 30
    settings.PORTAL_ABUSE_HISTORY_DAYS = 180
    member = _ended_days_ago(_member_with_data(), 31)
    email, user_id = member.user.email, member.user_id
    recent = _ended_days_ago(_member_with_data("Cid", "Roe"), 29)
    active = _member_with_data("Dee", "Fox")

    assert retention_run()["former_members_erased"] == 1

    member.refresh_from_db()
    user = member.user
    assert (user.first_name, user.last_name, user.email) == ("", "", "")
    assert user.username == f"former-{member.pk}"
    assert not user.is_active
    login = Client()
    login.post("/accounts/login/", {"username": f"former-{member.pk}", "password": PASSWORD})
    assert "_auth_user_id" not in login.session
    assert member.phone == ""
    assert member.erased_at is not None
    assert not Ticket.objects.filter(requester_id=user_id).exists()
    assert not Message.objects.filter(body_text="Ann here, help").exists()
    assert not Notice.objects.filter(member=member).exists()
    trail = json.dumps(
        list(AuditEntry.objects.filter(member=member).values("changes", "object_repr"))
    )
    assert email not in trail
    assert "Ann" not in trail
    assert "+49 30 1234" not in trail
    assert AuditEntry.objects.filter(member=member, action="member.erase").count() == 1
    # The abuse history still answers who held the address, and in which room they lived.
    holdings = AddressHolding.objects.filter(member=member)
    assert {name.split(" (")[0] for name in holdings.values_list("member_name", flat=True)} == {
        "Ann Lee"
    }
    assert member.room_stays.exists()
    # Not yet due, or not a former member: untouched.
    recent.refresh_from_db()
    active.refresh_from_db()
    assert recent.erased_at is None
    assert recent.user.email
    assert active.erased_at is None
    assert active.phone

    staff = Client()
    staff.force_login(member_active(user__username="vic", user__roles=["volunteer"]).user)
    page = staff.get(f"/office-hours/members/{member.pk}/", HTTP_ACCEPT_LANGUAGE="de")
    assert "Personenbezogene Daten gelöscht" in page.content.decode()

    assert retention_run()["former_members_erased"] == 0  # idempotent
    assert AuditEntry.objects.filter(member=member, action="member.erase").count() == 1


def test_erased_members_room_stays_go_with_the_abuse_history(settings: Any) -> None:
    settings.PORTAL_RETAIN_FORMER_MEMBERS_DAYS = 30
    settings.PORTAL_ABUSE_HISTORY_DAYS = 60
    member = _ended_days_ago(_member_with_data(), 31)
    retention_run()
    assert member.room_stays.exists()
    # The quarantined public address is the last holding: it ends 30 days after the membership.
    retention_run(now=timezone.now() + dt.timedelta(days=60 + 29))
    assert AddressHolding.objects.filter(member=member).exists()
    assert member.room_stays.exists()
    retention_run(now=timezone.now() + dt.timedelta(days=60 + 31))
    assert not AddressHolding.objects.filter(member=member).exists()
    assert not member.room_stays.exists()


def test_a_former_member_who_volunteers_keeps_their_login(settings: Any) -> None:
    from django.contrib.auth.models import Group

    settings.PORTAL_RETAIN_FORMER_MEMBERS_DAYS = 30
    member = _ended_days_ago(_member_with_data(), 31)
    member.user.groups.add(Group.objects.get_or_create(name="volunteer")[0])
    retention_run()
    member.refresh_from_db()
    assert member.erased_at is not None
    assert member.phone == ""
    assert member.user.is_active
    assert member.user.email
    assert member.user.first_name == "Ann"


def test_repeated_downloads_write_one_audit_row_per_day() -> None:
    """N8: a script downloading its data 20 times a day leaves one row that day, not 20; the
    next day's download is recorded again."""
    member = _member_with_data()
    client = _client(member)
    api = APIClient()
    api.force_authenticate(member.user)
    for _ in range(10):
        assert client.get("/me/data.json").status_code == 200
        assert api.get("/api/me/data/").status_code == 200
    exports = AuditEntry.objects.filter(action="member.data_export", member=member)
    assert exports.count() == 1
    exports.update(at=timezone.now() - dt.timedelta(days=1))  # that row was yesterday's
    assert client.get("/me/data.json").status_code == 200
    assert exports.count() == 2
