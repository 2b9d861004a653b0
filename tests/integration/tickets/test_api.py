"""API: /api/tickets/ (search, filters, ownership) and /api/incidents/ (support staff)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tickets.choices import MessageKind
from apps.tickets.models import Incident, Message
from apps.tickets.services import ticket_note, ticket_open
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def setup():
    alice = UserFactory(username="alice", roles=["member"])
    bob = UserFactory(username="bob", roles=["member"])
    sam = UserFactory(username="sam", roles=["support"])
    vic = UserFactory(username="vic", roles=["volunteer"])
    t1 = ticket_open(actor=alice, subject="Router", body="blinking orange light")
    t2 = ticket_open(actor=bob, subject="Wifi", body="slow in the kitchen")
    ticket_note(ticket=t1, actor=sam, body="hidden note")
    return {"alice": alice, "bob": bob, "sam": sam, "vic": vic, "t1": t1, "t2": t2}


def test_members_see_only_their_own(setup):
    client = api(setup["alice"])
    data = client.get("/api/tickets/").json()
    assert [t["id"] for t in data["results"]] == [setup["t1"].pk]
    assert client.get(f"/api/tickets/{setup['t2'].pk}/").status_code == 404
    detail = client.get(f"/api/tickets/{setup['t1'].pk}/").json()
    assert [m["kind"] for m in detail["messages"]] == ["inbound"]  # no internal note
    assert api(setup["vic"]).get("/api/tickets/").json()["count"] == 0


def test_support_search_and_filters(setup):
    client = api(setup["sam"])
    assert client.get("/api/tickets/").json()["count"] == 2
    search = client.get("/api/tickets/", {"search": "orange"}).json()  # message text
    assert [t["id"] for t in search["results"]] == [setup["t1"].pk]
    assert client.get("/api/tickets/", {"search": "bob@example.org"}).json()["count"] == 1
    assert client.get("/api/tickets/", {"search": "wifi"}).json()["count"] == 1  # subject
    assert client.get("/api/tickets/", {"status": "solved"}).json()["count"] == 0
    assert client.get("/api/tickets/", {"assignee": "none"}).json()["count"] == 2
    detail = client.get(f"/api/tickets/{setup['t1'].pk}/").json()
    assert "note" in [m["kind"] for m in detail["messages"]]


def test_member_creates_and_replies_but_cannot_change_status(setup):
    client = api(setup["alice"])
    created = client.post("/api/tickets/", {"subject": "New", "body": "help"}, format="json")
    assert created.status_code == 201
    pk = created.json()["id"]
    assert client.post(f"/api/tickets/{pk}/", {"reply": "more"}, format="json").status_code == 200
    assert (
        client.post(f"/api/tickets/{pk}/", {"status": "closed"}, format="json").status_code == 400
    )


def test_support_replies_through_the_api(setup, django_capture_on_commit_callbacks):
    client = api(setup["sam"])
    with django_capture_on_commit_callbacks():
        response = client.post(
            f"/api/tickets/{setup['t1'].pk}/",
            {"reply": "Please restart it", "status": "waiting"},
            format="json",
        )
    assert response.status_code == 200
    assert response.json()["status"] == "waiting"
    assert Message.objects.filter(ticket=setup["t1"], kind=MessageKind.OUTBOUND).exists()


def test_incidents_api_is_for_support_staff(setup):
    for who in ("alice", "vic"):
        assert api(setup[who]).get("/api/incidents/").status_code == 403
    client = api(setup["sam"])
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    created = client.post(
        "/api/incidents/",
        {
            "title": "Wifi outage",
            "keywords": ["wifi"],
            "affected": ["Building A"],
            "started_at": since,
        },
        format="json",
    )
    assert created.status_code == 201
    body = created.json()
    assert body["ticket_count"] == 1  # "Wifi" ticket linked at declaration
    listed = client.get("/api/incidents/", {"current": "1"}).json()
    assert [i["title"] for i in listed["results"]] == ["Wifi outage"]
    pk = body["id"]
    assert client.post(f"/api/incidents/{pk}/", {"action": "solve"}, format="json").json() == {
        "done": 1
    }
    client.post(f"/api/incidents/{pk}/", {"action": "end", "body": "done"}, format="json")
    assert Incident.objects.get(pk=pk).ended_at is not None


def test_anonymous_gets_401():
    assert APIClient().get("/api/tickets/").status_code == 401
