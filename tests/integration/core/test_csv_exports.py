"""Staff download the office-hours and inbox tables as CSV with the page's filters applied: the
file opens in a spreadsheet without running anything a member typed, members cannot download
it, and every download is in the audit trail with its filter."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from apps.audit.models import AuditEntry
from apps.audit.sentences import audit_sentence
from apps.dhcp.models import Lease
from apps.firewall.models import FirewallHost
from apps.tickets.models import Queue
from apps.tickets.services import ticket_open, ticket_update
from tests.factories import RoomFactory, UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


def rows_of(response) -> list[list[str]]:
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse)  # streamed, not built in memory
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith("attachment; filename=")
    text = b"".join(response.streaming_content).decode("utf-8")
    assert text.startswith("\ufeff")
    return list(csv.reader(io.StringIO(text[1:])))


def staff(role: str = "volunteer", **kw) -> Client:
    client = Client()
    client.force_login(UserFactory(roles=[role], **kw))
    return client


@pytest.fixture
def residents():
    mallory = member_active(
        user=UserFactory(username="mallory", first_name='=HYPERLINK("http://x")', last_name="M"),
        room=RoomFactory(label="A-101"),
    )
    ben = member_active(
        user=UserFactory(username="ben", first_name="Ben", last_name="Schulz"),
        room=RoomFactory(label="B-202"),
    )
    device_add(mallory, name="+tv", mac="02:00:00:00:aa:01")
    device_add(ben, name="laptop", mac="02:00:00:00:bb:01")
    return mallory, ben


def test_members_export_applies_the_search_and_neutralises_formulas(residents):
    mallory, ben = residents
    client = staff()
    everyone = rows_of(client.get(reverse("members:member_export")))
    assert everyone[0][:4] == ["Name", "Login", "E-mail", "Room"]
    assert sorted(r[1] for r in everyone[1:]) == ["ben", "mallory"]

    found = rows_of(client.get(reverse("members:member_export"), {"q": "A-101"}))
    assert len(found) == 2
    name, login, _email, room, status, public = found[1][:6]
    assert (login, room, status) == ("mallory", "A-101", "Active")
    assert name == '\'=HYPERLINK("http://x") M'  # shown as text, never run
    assert public == str(mallory.public_ipv4.address)

    devices = rows_of(client.get(reverse("network:device_export"), {"q": "A-101"}))
    assert [r[2:4] for r in devices[1:]] == [["'+tv", "02:00:00:00:aa:01"]]
    of_ben = rows_of(client.get(reverse("network:device_export"), {"member": ben.pk}))
    assert [r[2] for r in of_ben[1:]] == ["laptop"]


def test_german_headers_and_labels():
    member_active(user=UserFactory(username="ben"))
    client = staff()
    rows = rows_of(client.get(reverse("members:member_export"), HTTP_ACCEPT_LANGUAGE="de"))
    with translation.override("de"):
        assert rows[0][0] == "Name"
        assert rows[0][4] == str(translation.gettext("Status"))
        assert rows[1][4] == "Aktiv"


def test_lease_export_follows_the_searched_mac(residents):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    now = timezone.now()
    for n, mac in enumerate(["02:00:00:00:aa:01", "02:00:00:00:bb:01", "02:00:00:00:cc:01"]):
        Lease.objects.create(
            host=host, host_name="pl-nat1", mac=mac, address=f"10.100.0.{n + 10}",
            starts=now - timedelta(hours=1), ends=now + timedelta(hours=1), seen_at=now,
        )  # fmt: skip
    client = staff()
    rows = rows_of(client.get(reverse("dhcp:lease_export"), {"q": "02-00-00-00-aa-01"}))
    assert [(r[0], r[1], r[6]) for r in rows[1:]] == [("10.100.0.10", "02:00:00:00:aa:01", "'+tv")]
    assert len(rows_of(client.get(reverse("dhcp:lease_export")))) == 4


def test_ticket_export_uses_the_inbox_filters_and_support_roles_only(make_user):
    alice = UserFactory(username="alice", roles=["member"])
    sam = UserFactory(username="sam", roles=["support"])
    net = Queue.objects.create(slug="net", name="Network")
    wifi = ticket_open(actor=alice, subject="@wifi down", body="since noon")
    ticket_open(actor=alice, subject="Printer", body="jammed")
    done = ticket_open(actor=alice, subject="Old", body="fixed")
    ticket_update(ticket=wifi, actor=sam, queue=net)
    ticket_update(ticket=done, actor=sam, status="solved")
    client = Client()
    client.force_login(sam)
    url = reverse("tickets:ticket_export")

    active = rows_of(client.get(url))  # the inbox's default: active tickets
    assert sorted(r[1] for r in active[1:]) == ["'@wifi down", "Printer"]
    queued = rows_of(client.get(url, {"queue": "net", "status": "all"}))
    assert [(r[0], r[1], r[5]) for r in queued[1:]] == [(str(wifi.pk), "'@wifi down", "Network")]
    searched = rows_of(client.get(url, {"status": "all", "q": "fixed"}))
    assert [r[1] for r in searched[1:]] == ["Old"]

    inbox = client.get(reverse("tickets:inbox"), {"queue": "net"}).text
    assert f'href="{url}?queue=net&amp;status=active"' in inbox

    for role in ("member", "volunteer"):  # volunteers do not read the mailbox either
        other = Client()
        other.force_login(make_user(roles=(role,)))
        assert other.get(url).status_code == 403


@pytest.mark.parametrize(
    "name", ["members:member_export", "network:device_export", "dhcp:lease_export"]
)
def test_members_cannot_download_the_office_hours_tables(make_user, name):
    member = Client()
    member.force_login(make_user("mia"))
    assert member.get(reverse(name)).status_code == 403
    assert Client().get(reverse(name)).status_code == 302  # to the login page
    assert not AuditEntry.objects.filter(action__startswith="export.").exists()


def test_each_download_is_audited_with_its_filter(residents):
    client = staff(username="vera", first_name="Vera", last_name="Vogel")
    client.get(reverse("members:member_export"), {"q": "A-101"})
    client.get(reverse("network:device_export"))
    entries = list(AuditEntry.objects.filter(action__startswith="export.").order_by("id"))
    assert [e.action for e in entries] == ["export.members", "export.devices"]
    assert entries[0].changes == {"filter": [None, "q=A-101"]}
    with translation.override("en"):
        assert str(audit_sentence(entries[0])) == (
            "Vera Vogel downloaded the members as CSV, filtered by q=A-101"
        )
        assert str(audit_sentence(entries[1])) == "Vera Vogel downloaded all devices as CSV"


def test_office_hours_offers_the_downloads_for_the_current_search(residents):
    page = staff().get(reverse("members:office_hours"), {"q": "A-101"}).text
    assert f'href="{reverse("members:member_export")}?q=A-101"' in page
    assert f'href="{reverse("dhcp:lease_export")}?q=A-101"' in page
