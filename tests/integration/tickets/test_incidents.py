"""Incidents: auto-linking, the mass reply (real SMTP sink, idempotent), solving, status page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.core.cache import cache
from django.db import OperationalError, connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.dhcp.walled import registration_networks_forget
from apps.tickets.choices import MessageKind, TicketStatus
from apps.tickets.models import Incident, Message, Ticket
from apps.tickets.services import (
    broadcast_send,
    incident_declare,
    incident_end,
    incident_mass_reply,
    incident_tickets_solve,
    incident_update_post,
    ticket_open,
)
from apps.tickets.status import (
    status_cache_clear,
    status_cache_refresh,
    status_html_forget_local,
)
from tests.factories import UserFactory
from tests.integration.tickets.conftest import make_mail
from workers.mail import incident_broadcast_send


@pytest.fixture(autouse=True)
def _clean_status_cache():
    status_cache_clear()
    yield
    status_cache_clear()


def test_mail_during_an_incident_is_linked_by_keyword(listener):
    staff = UserFactory(username="sam", roles=["support"])
    incident = incident_declare(
        actor=staff,
        title="Building B offline",
        keywords=["internet", "offline"],
        affected=["Building B"],
    )
    listener.send(make_mail(subject="No INTERNET in B 204", sender="a@example.org"))
    listener.send(make_mail(subject="Printer jam", body="paper stuck", sender="b@example.org"))
    assert Ticket.objects.get(requester_email="a@example.org").incident == incident
    assert Ticket.objects.get(requester_email="b@example.org").incident is None


def test_mass_reply_threads_each_ticket_and_is_idempotent(listener, smtp_sink):
    staff = UserFactory(username="sam", first_name="Sam", roles=["support"])
    originals = []
    for n in range(3):
        mail = make_mail(subject=f"offline {n}", sender=f"Person {n} <p{n}@example.org>")
        originals.append(mail)
        listener.send(mail)
    acks = len(smtp_sink.wait_for(3))
    assert acks == 3
    incident = incident_declare(
        actor=staff,
        title="Uplink down",
        keywords=["offline"],
        started_at=timezone.now() - timedelta(hours=1),
    )
    assert incident.tickets.count() == 3  # linked at declaration, since its start

    broadcast = incident_mass_reply(
        incident=incident,
        actor=staff,
        body="Dear {first_name}, the uplink is back ({ticket_number}).",
    )
    mails = smtp_sink.wait_for(acks + 3)[acks:]
    assert len(mails) == 3
    by_to = {m["To"]: m for m in mails}
    for n, original in enumerate(originals):
        reply = by_to[f"p{n}@example.org"]
        ticket = Ticket.objects.get(requester_email=f"p{n}@example.org")
        assert reply["In-Reply-To"] == original["Message-ID"]
        assert original["Message-ID"] in reply["References"]
        assert ticket.subject_tag in reply["Subject"]
        assert f"Dear Person, the uplink is back (#{ticket.pk})." in reply.get_content()
        assert ticket.status == TicketStatus.WAITING
        assert ticket.first_response_at
    assert len({m["Message-ID"] for m in mails}) == 3

    # The task runs again (a retry, a duplicate delivery): nobody gets a second mail.
    incident_broadcast_send.delay(broadcast.pk)
    assert broadcast_send(broadcast_id=broadcast.pk) == 0
    assert len(smtp_sink.wait_for(acks + 4, timeout=0.5)) == acks + 3
    assert Message.objects.filter(broadcast=broadcast, sent_at__isnull=False).count() == 3


def test_mass_reply_retry_sends_only_the_unsent(listener, smtp_sink, settings):
    staff = UserFactory(username="sam", roles=["support"])
    incident = incident_declare(actor=staff, title="Outage", keywords=["down"])
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    for n in range(4):
        listener.send(make_mail(subject=f"down {n}", sender=f"p{n}@example.org"))
    port = settings.EMAIL_PORT
    settings.EMAIL_PORT = 1  # the relay is unreachable: the task fails and would retry
    with pytest.raises((OSError, Retry)):  # the eager task asks Celery to retry it later
        incident_mass_reply(incident=incident, actor=staff, body="Fixed.")
    broadcast = incident.broadcasts.get()
    assert not Message.objects.filter(broadcast=broadcast, sent_at__isnull=False).exists()
    Message.objects.filter(pk=Message.objects.filter(broadcast=broadcast).first().pk).update(
        sent_at=timezone.now()
    )  # one went out before the failure
    settings.EMAIL_PORT = port
    assert broadcast_send(broadcast_id=broadcast.pk) == 3
    assert len(smtp_sink.wait_for(4, timeout=1)) == 3


@pytest.mark.django_db
def test_incident_solve_all_and_end(django_capture_on_commit_callbacks):
    staff = UserFactory(username="sam", roles=["support"])
    member = UserFactory(username="m", roles=["member"])
    incident = incident_declare(actor=staff, title="Wi-Fi down", keywords=["wifi"])
    ticket = ticket_open(actor=member, subject="wifi gone", body="since noon")
    assert ticket.incident == incident
    assert incident_tickets_solve(incident=incident, actor=staff) == 1
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.SOLVED
    assert ticket.solved_at
    incident_end(incident=incident, actor=staff, body="All good")
    incident.refresh_from_db()
    assert incident.ended_at
    assert incident.updates.first().body == "All good"
    assert not Incident.objects.current().exists()


@pytest.mark.django_db
def test_incident_pages_declare_link_and_mass_reply(django_capture_on_commit_callbacks):
    staff = UserFactory(username="sam", roles=["support"])
    member = UserFactory(username="m", roles=["member"])
    unrelated = ticket_open(actor=member, subject="question", body="about my bill")
    client = Client()
    client.force_login(staff)
    response = client.post(
        reverse("tickets:incident_list"),
        {
            "title": "Building A down",
            "severity": "critical",
            "affected": "Building A, Wi-Fi",
            "keywords": "down",
            "started_at": (timezone.localtime() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
            "public": "on",
            "description": "We are looking into it.",
        },
    )
    incident = Incident.objects.get()
    assert response.url == reverse("tickets:incident_detail", args=[incident.pk])
    assert incident.affected == ["Building A", "Wi-Fi"]
    detail = reverse("tickets:incident_detail", args=[incident.pk])
    client.post(detail, {"action": "link", "tickets": f"#{unrelated.pk}"})
    unrelated.refresh_from_db()
    assert unrelated.incident == incident
    page = client.get(detail)
    assert "1 linked ticket" in page.text
    with django_capture_on_commit_callbacks() as callbacks:
        preview = client.post(detail, {"action": "mass_reply", "body": "Back up, {first_name}."})
    assert "Preview: this goes to 1 ticket" in preview.text
    assert not callbacks  # the preview sends nothing
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(
            detail,
            {"action": "mass_reply", "body": "Back up, {first_name}.", "confirmed_count": "1"},
        )
    assert len(callbacks) == 1
    assert (
        Message.objects.filter(
            ticket=unrelated, kind=MessageKind.OUTBOUND, broadcast__isnull=False
        ).count()
        == 1
    )


@pytest.mark.django_db
def test_status_page_public_cached_and_survives_a_dead_database(django_assert_num_queries):
    staff = UserFactory(username="sam", roles=["support"])
    with_update = incident_declare(
        actor=staff,
        title="Uplink degraded",
        description="Slow since 10:00",
        affected=["Building C"],
    )
    incident_declare(actor=staff, title="Internal only", public=False)
    status_cache_clear()
    url = reverse("tickets:status_page")
    page = Client().get(url)
    assert page.status_code == 200
    assert "Uplink degraded" in page.text
    assert "Slow since 10:00" in page.text
    assert "Internal only" not in page.text
    with django_assert_num_queries(0):
        assert "Uplink degraded" in Client().get(url).text  # from the cache

    incident_update_post(incident=with_update, actor=staff, body="Cause found", phase="identified")
    status_cache_clear()  # (on_commit does this in production; the test transaction never commits)
    assert "Cause found" in Client().get(url).text

    # The database stops answering and the cache entry expires: the last good copy is served.
    cache.delete_many(["tickets:status:data", "tickets:status:html:en"])
    status_html_forget_local()  # and this web process's copy is older than LOCAL_SECONDS
    # The walled garden's ranges (read before every page, at most every 10 s) are due too: its
    # middleware must not turn the dead database into a 500 (it did, under `pytest -n 4`).
    registration_networks_forget()
    with connection.execute_wrapper(_fail):
        page = Client().get(url)
    assert page.status_code == 200
    assert "Cause found" in page.text
    assert "last known state" in page.text


def _fail(execute, sql, params, many, context):
    raise OperationalError("database down")


@pytest.mark.django_db
def test_banner_for_members_while_an_incident_is_open(django_assert_num_queries):
    staff = UserFactory(username="sam", roles=["support"])
    member = UserFactory(username="m", roles=["member"])
    client = Client()
    client.force_login(member)
    assert 'data-testid="incident-banner"' not in client.get(reverse("tickets:my_tickets")).text
    incident = incident_declare(actor=staff, title="Building D offline")
    status_cache_refresh()  # what the service does on commit
    page = client.get(reverse("tickets:my_tickets"))
    assert 'data-testid="incident-banner"' in page.text
    assert "Building D offline" in page.text
    incident_end(incident=incident, actor=staff)
    status_cache_refresh()
    with django_assert_num_queries(0):
        from apps.tickets.templatetags.tickets_tags import incident_banner

        assert incident_banner() == {"incidents": []}  # the banner never queries
    assert "Building D offline" not in client.get(reverse("tickets:my_tickets")).text
