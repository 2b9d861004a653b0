"""The ticket's history and the audit trail's changes read as words in the reader's language,
never as `ticket.assign` or `link_kbit`."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.audit.services import audit_record
from apps.firewall.models import FirewallHost
from apps.tickets.models import Queue
from apps.tickets.services import ticket_note, ticket_open, ticket_update
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _history(page: str) -> list[str]:
    items = re.findall(r'<li data-testid="ticket-event"><small>(.*?)</small></li>', page, re.S)
    return [re.sub(r"<[^>]+>", "", item).split(" · ", 1)[1].strip() for item in items]


def test_the_ticket_history_reads_as_sentences_in_english_and_german():
    alice = UserFactory(username="alice", first_name="Alice", last_name="Amsel", roles=["member"])
    sam = UserFactory(username="sam", first_name="Sam", last_name="Stein", roles=["support"])
    ticket = ticket_open(actor=alice, subject="No internet", body="Since this morning")
    ticket_note(ticket=ticket, actor=sam, body="checking the switch")
    queue = Queue.objects.create(slug="network", name="Network")
    ticket_update(ticket=ticket, actor=sam, status="waiting", assignee=sam, queue=queue)
    ticket_update(ticket=ticket, actor=sam, assignee=None, tags=["wifi", "dorm-a"])
    client = Client()
    client.force_login(sam)
    url = reverse("tickets:ticket_detail", args=[ticket.pk])

    english = _history(client.get(url, HTTP_ACCEPT_LANGUAGE="en").text)
    assert english == [
        "Alice Amsel opened the ticket in the portal",
        "Sam Stein added an internal note",
        "Sam Stein set the status to Waiting for member. Sam Stein assigned the ticket to sam. "
        "Sam Stein moved the ticket to the queue network",
        "Sam Stein removed the assignee. Sam Stein set the tags to dorm-a, wifi",
    ]
    client.cookies["django_language"] = "de"
    german = _history(client.get(url, HTTP_ACCEPT_LANGUAGE="de").text)
    assert german[0] == "Alice Amsel hat das Ticket im Portal eröffnet"
    assert german[2].startswith("Sam Stein hat den Status auf „Wartet auf Mitglied“ gesetzt")
    assert not any("ticket." in line or "=" in line for line in english + german)


def test_the_audit_trail_names_changed_fields_in_words(make_user):
    admin = make_user("ada", roles=("admin",))
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    audit_record(
        actor=admin,
        action="firewallhost.change",
        obj=host,
        changes={"link_kbit": [1000, 2000], "enabled": [True, False]},
    )
    client = Client()
    client.force_login(admin)
    url = reverse("firewall:host_detail", args=[host.name])
    english = client.get(url, HTTP_ACCEPT_LANGUAGE="en").text
    assert "<strong>Link rate (kbit/s)</strong>: 1000 → 2000" in english
    assert "<strong>Enabled</strong>: yes → no" in english
    assert "link_kbit" not in english
    client.cookies["django_language"] = "de"
    german = client.get(url, HTTP_ACCEPT_LANGUAGE="de").text
    assert "<strong>Aktiv</strong>: ja → nein" in german
