"""The mass reply as support staff meet it: a preview of one real rendered message and the count,
then a confirmation; greetings without a first name; one # per ticket number; each requester's
language when a German text is given."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.notifications.models import Preference
from apps.tickets.mailparse import parse_mail
from apps.tickets.models import IncidentBroadcast, Message, Ticket
from apps.tickets.services import incident_declare, mail_ingest, ticket_open
from tests.factories import MemberFactory, UserFactory
from tests.integration.tickets.conftest import make_mail

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff():
    return UserFactory(username="sam", first_name="Sam", roles=["support"])


@pytest.fixture
def client(staff):
    client = Client()
    client.force_login(staff)
    return client


def member_ticket(first_name: str, language: str = "") -> Ticket:
    member = MemberFactory(user__first_name=first_name, user__username=first_name.lower())
    if language:
        Preference.objects.create(member=member, language=language)
    return ticket_open(actor=member.user, subject="offline", body="No internet since 9")


def anonymous_ticket(address: str) -> Ticket:
    """A ticket from a bare address with no name at all (the mail's From has none)."""
    mail_ingest(parsed=parse_mail(make_mail(subject="offline", sender=address).as_bytes()))
    return Ticket.objects.get(requester_email=address)


@pytest.fixture
def incident(staff):
    return incident_declare(actor=staff, title="Uplink down", keywords=["offline"])


def detail(incident) -> str:
    return reverse("tickets:incident_detail", args=[incident.pk])


def test_preview_shows_a_real_message_and_the_count_and_sends_nothing(
    client, incident, django_capture_on_commit_callbacks
):
    anna = member_ticket("Anna")
    member_ticket("Ben")
    with django_capture_on_commit_callbacks() as callbacks:
        page = client.post(
            detail(incident),
            {"action": "mass_reply", "body": "{greeting} the uplink is back ({ticket_number})."},
        )
    assert page.status_code == 200
    assert "Preview: this goes to 2 tickets" in page.text
    assert f"As #{anna.pk} (" in page.text
    assert f"Hello Anna, the uplink is back (#{anna.pk})." in page.text
    assert "Send to all 2 tickets" in page.text
    assert not IncidentBroadcast.objects.exists()
    assert not Message.objects.filter(broadcast__isnull=False).exists()
    assert not callbacks  # no mail task queued


def test_confirmation_sends_to_every_ticket_once(
    client, incident, django_capture_on_commit_callbacks
):
    tickets = [member_ticket("Anna"), member_ticket("Ben")]
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            detail(incident),
            {"action": "mass_reply", "body": "Fixed, {first_name}.", "confirmed_count": "2"},
            follow=True,
        )
    assert "Reply queued for 2 tickets." in response.text
    assert len(callbacks) == 1
    texts = {m.ticket_id: m.body_text for m in Message.objects.filter(broadcast__isnull=False)}
    assert texts == {tickets[0].pk: "Fixed, Anna.", tickets[1].pk: "Fixed, Ben."}


def test_a_stale_confirmation_sends_nothing_and_previews_again(client, incident):
    member_ticket("Anna")
    member_ticket("Ben")
    member_ticket("Cem")  # linked after the preview that said 2
    page = client.post(
        detail(incident), {"action": "mass_reply", "body": "Fixed.", "confirmed_count": "2"}
    )
    assert "changed from 2 to 3 since the preview: nothing was sent" in page.text
    assert "Preview: this goes to 3 tickets" in page.text
    assert not IncidentBroadcast.objects.exists()


def test_greeting_without_a_first_name_never_reads_hello_comma(client, incident):
    nameless = anonymous_ticket("x7@example.org")
    client.post(
        detail(incident),
        {
            "action": "mass_reply",
            "body": "{greeting} back up.\nHello {first_name}, see #{ticket_number}.",
            "confirmed_count": "1",
        },
    )
    text = Message.objects.get(ticket=nameless, broadcast__isnull=False).body_text
    assert text == f"Hello, back up.\nHello, see #{nameless.pk}."
    assert "Hello ," not in text
    assert "##" not in text


def test_the_help_says_ticket_number_includes_its_hash(client, incident):
    page = client.get(detail(incident)).text
    assert "{ticket_number} (with its # sign: #12)" in page
    assert "{greeting}" in page


def test_each_requester_gets_their_language_when_a_german_text_is_given(client, incident):
    german, english, unchosen = (
        member_ticket("Anna", "de"),
        member_ticket("Ben", "en"),
        member_ticket("Cem"),
    )
    form = {
        "action": "mass_reply",
        "body": "{greeting} the uplink is back.",
        "body_de": "{greeting} die Verbindung steht wieder.",
    }
    preview = client.post(detail(incident), form).text
    assert "1 in German" in preview
    assert "1 in English" in preview
    assert "1 in English and German (no language chosen)" in preview
    assert "Hallo Anna, die Verbindung steht wieder." in preview

    client.post(detail(incident), {**form, "confirmed_count": "3"})
    text = {m.ticket_id: m.body_text for m in Message.objects.filter(broadcast__isnull=False)}
    assert text[german.pk] == "Hallo Anna, die Verbindung steht wieder."
    assert text[english.pk] == "Hello Ben, the uplink is back."
    assert text[unchosen.pk] == (
        "Hello Cem, the uplink is back.\n\n-- \n\nHallo Cem, die Verbindung steht wieder."
    )


def test_without_a_german_text_everyone_reads_english(client, incident):
    german = member_ticket("Anna", "de")
    client.post(
        detail(incident),
        {"action": "mass_reply", "body": "{greeting} fixed.", "confirmed_count": "1"},
    )
    assert Message.objects.get(ticket=german, broadcast__isnull=False).body_text == (
        "Hello Anna, fixed."
    )


def test_an_empty_reply_is_refused_and_nothing_is_stored(client, incident):
    member_ticket("Anna")
    page = client.post(
        detail(incident), {"action": "mass_reply", "body": "  ", "confirmed_count": "1"}
    )
    assert page.status_code == 400
    assert "This field is required." in page.text
    assert not IncidentBroadcast.objects.exists()
