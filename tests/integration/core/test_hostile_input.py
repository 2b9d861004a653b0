"""Hostile input from issue 25 (N1..N8): each answer is a clear refusal, never a 500, and
changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.tickets.models import Incident

pytestmark = pytest.mark.django_db

EDGE_TIMES = [
    "0001-01-01 00:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31 23:59",
    "9999-12-31T23:59:59Z",
]


@pytest.fixture
def support(client_for) -> Client:
    client = client_for("support")
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize("start", ["0001-01-01T00:00", "9999-12-31T23:59", "1899-06-01T10:00"])
def test_incident_form_refuses_a_start_outside_a_sane_range(support, start):
    response = support.post(
        reverse("tickets:incident_list"),
        {"title": "Outage", "severity": "major", "started_at": start},
    )
    assert response.status_code == 400
    assert "Enter a time between" in response.content.decode()
    assert not Incident.objects.exists()
    assert support.get(reverse("tickets:incident_list")).status_code == 200
    assert support.get("/api/incidents/").status_code == 200


@pytest.mark.parametrize("start", EDGE_TIMES)
def test_incident_api_refuses_a_start_outside_a_sane_range(support, start):
    response = support.post(
        "/api/incidents/", {"title": "Outage", "started_at": start}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "started_at" in response.json()
    assert not Incident.objects.exists()


def test_incident_service_refuses_a_start_outside_a_sane_range(make_user):
    import datetime as dt

    from apps.tickets.services import TicketError, incident_declare

    with pytest.raises(TicketError, match="Enter a time between"):
        incident_declare(
            actor=make_user(roles=("support",)),
            title="Outage",
            started_at=dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        )
    assert not Incident.objects.exists()


# N3: times at the calendar's edge in the abuse lookup (page, API, command) and top talkers.


@pytest.fixture
def abuse(client_for) -> Client:
    client = client_for("abuse")
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize("at", EDGE_TIMES)
def test_abuse_lookup_refuses_times_at_the_calendars_edge(abuse, at):
    from django.core.management import CommandError, call_command

    from apps.abuse.models import AbuseLookup

    form = {"address": "198.51.100.7", "at": at, "reason": "CERT 1"}
    page = abuse.post(reverse("abuse:lookup"), form, HTTP_HX_REQUEST="true")
    assert page.status_code == 200
    assert "Enter a time between" in page.content.decode() or "future" in page.content.decode()
    api = abuse.post(reverse("api-abuse-lookup"), form, content_type="application/json")
    assert api.status_code == 400
    assert list(api.json()) == ["at"]
    with pytest.raises(CommandError):
        call_command("abuse_lookup", "198.51.100.7", at, reason="CERT 1")
    assert not AbuseLookup.objects.exists()


@pytest.mark.parametrize(
    "hour", ["0001-01-01T00:00", "0001-01-01T00:00:00Z", "9999-12-31T23:00", "9999-12-31T23:59Z"]
)
def test_top_talkers_api_refuses_hours_at_the_calendars_edge(client_for, hour):
    client = client_for("volunteer")
    client.raise_request_exception = False
    response = client.get(reverse("api-traffic-top"), {"hour": hour})
    assert response.status_code == 400
    assert list(response.json()) == ["hour"]


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31"])
def test_top_talkers_page_refuses_days_at_the_calendars_edge(client_for, day):
    client = client_for("volunteer")
    client.raise_request_exception = False
    response = client.get(reverse("traffic:top"), {"day": day, "hour": 0})
    assert response.status_code == 422
    assert "Enter a time between" in response.content.decode()


# N4: /metrics must not grow by what an anonymous client sends.


def test_metrics_do_not_grow_with_made_up_http_methods(client):
    client.raise_request_exception = False
    before = client.get("/metrics").content.decode()
    for n in range(25):
        client.generic(f"FOO{n}", "/")
        client.generic(f"FOO{n}", "/no/such/page/")
    after = client.get("/metrics").content.decode()
    assert "FOO" not in after
    assert 'method="other"' in after

    def label_sets(text: str) -> set[str]:
        prefix = "portal_http_request_seconds_count{"
        return {line.split("}")[0] for line in text.splitlines() if line.startswith(prefix)}

    # 50 requests with 25 made-up methods on two views: at most one new series per view.
    added = label_sets(after) - label_sets(before)
    assert len(added) <= 3, added  # "/", the unresolved path, and /metrics itself
