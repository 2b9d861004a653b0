"""Ticket pages: who sees what, reply and note, inbox filters and bulk actions, canned answers."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from apps.tickets.choices import MessageKind, TicketStatus
from apps.tickets.models import CannedResponse, InboundMail, Incident, Message, Ticket
from apps.tickets.services import ticket_note, ticket_open
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def people():
    return {
        "alice": UserFactory(username="alice", first_name="Alice", roles=["member"]),
        "bob": UserFactory(username="bob", roles=["member"]),
        "vic": UserFactory(username="vic", roles=["volunteer"]),
        "sam": UserFactory(username="sam", first_name="Sam", roles=["support"]),
        "ada": UserFactory(username="ada", roles=["admin"]),
    }


@pytest.fixture
def alice_ticket(people):
    ticket = ticket_open(
        actor=people["alice"], subject="Port forward broken", body="My game server is unreachable"
    )
    ticket_note(ticket=ticket, actor=people["sam"], body="SECRET staff note")
    return ticket


def test_member_sees_only_own_tickets_and_never_notes(people, alice_ticket):
    alice, bob = login(people["alice"]), login(people["bob"])
    url = reverse("tickets:my_ticket", args=[alice_ticket.pk])
    page = alice.get(url)
    assert page.status_code == 200
    assert "My game server" in page.text
    assert "SECRET" not in page.text
    assert bob.get(url).status_code == 404
    assert "Port forward broken" not in bob.get(reverse("tickets:my_tickets")).text
    assert bob.post(url, {"body": "hijack"}).status_code == 404


@pytest.mark.parametrize("who", ["alice", "vic"])
def test_members_and_volunteers_cannot_use_the_support_screens(people, alice_ticket, who):
    client = login(people[who])
    for url in (
        reverse("tickets:inbox"),
        reverse("tickets:ticket_detail", args=[alice_ticket.pk]),
        reverse("tickets:incident_list"),
        reverse("tickets:quarantine"),
        reverse("tickets:stats"),
    ):
        assert client.get(url).status_code == 403, url


def test_anonymous_is_sent_to_login(alice_ticket):
    response = Client().get(reverse("tickets:inbox"))
    assert response.status_code == 302
    assert "/accounts/login/" in response.url


@pytest.mark.parametrize("who", ["sam", "ada"])
def test_support_and_admin_see_every_ticket_with_notes(people, alice_ticket, who):
    page = login(people[who]).get(reverse("tickets:ticket_detail", args=[alice_ticket.pk]))
    assert page.status_code == 200
    assert "SECRET staff note" in page.text
    assert 'data-testid="member-context"' in page.text
    assert "alice@example.org" in page.text


def test_reply_and_note_from_the_ticket_page(
    people, alice_ticket, django_capture_on_commit_callbacks
):
    client = login(people["sam"])
    url = reverse("tickets:ticket_detail", args=[alice_ticket.pk])
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            url, {"action": "reply", "body": "Hi {first_name}, fixed.", "status": "solved"}
        )
    assert response.status_code == 302
    assert len(callbacks) == 1  # the send task is enqueued after commit
    reply = Message.objects.get(ticket=alice_ticket, kind=MessageKind.OUTBOUND)
    assert reply.body_text == "Hi Alice, fixed."
    alice_ticket.refresh_from_db()
    assert alice_ticket.status == TicketStatus.SOLVED
    assert alice_ticket.first_response_at is not None
    assert alice_ticket.assignee == people["sam"]

    client.post(url, {"action": "note", "body": "second note"})
    assert Message.objects.filter(ticket=alice_ticket, kind=MessageKind.NOTE).count() == 2
    # the member sees the reply, not the notes
    member_page = login(people["alice"]).get(reverse("tickets:my_ticket", args=[alice_ticket.pk]))
    assert "Hi Alice, fixed." in member_page.text
    assert "second note" not in member_page.text


def test_empty_reply_is_refused(people, alice_ticket):
    from django.core import mail as outbox

    messages_before = list(Message.objects.filter(ticket=alice_ticket).values_list("pk", flat=True))
    status_before = alice_ticket.status
    response = login(people["sam"]).post(
        reverse("tickets:ticket_detail", args=[alice_ticket.pk]),
        {"action": "reply", "body": "", "status": "waiting"},
    )
    assert response.status_code == 400
    # Nothing stored, nothing sent, the ticket as it was, and the form says why.
    after = list(Message.objects.filter(ticket=alice_ticket).values_list("pk", flat=True))
    assert after == messages_before
    assert outbox.outbox == []
    alice_ticket.refresh_from_db()
    assert alice_ticket.status == status_before
    assert "This field is required" in response.text


def test_member_opens_and_follows_a_ticket(people):
    client = login(people["bob"])
    response = client.post(
        reverse("tickets:my_tickets"), {"subject": "No wifi", "body": "Room 12 has no wifi"}
    )
    ticket = Ticket.objects.get()
    assert response.url == reverse("tickets:my_ticket", args=[ticket.pk])
    assert ticket.requester == people["bob"]
    assert ticket.channel == "portal"
    client.post(response.url, {"body": "still nothing"})
    assert ticket.messages.count() == 2


def test_inbox_filters_search_pagination_and_partial(people, alice_ticket):
    other = ticket_open(actor=people["bob"], subject="Printer", body="the quick brown fox")
    client = login(people["sam"])
    inbox = reverse("tickets:inbox")
    page = client.get(inbox)
    assert "Port forward broken" in page.text
    assert "Printer" in page.text
    assert "Keyboard shortcuts" in page.text
    assert "Printer" not in client.get(inbox, {"q": "game server"}).text  # message text
    assert "Printer" in client.get(inbox, {"q": "bob@example"}).text  # sender
    assert "Port forward" not in client.get(inbox, {"q": f"#{other.pk}"}).text
    assert "Port forward" not in client.get(inbox, {"assignee": "me"}).text
    partial = client.get(inbox, {"status": "new"}, HTTP_HX_REQUEST="true")
    assert partial.text.lstrip().startswith('<div id="ticket-table">')
    for n in range(55):
        Ticket.objects.create(subject=f"bulk {n}", requester_email="x@example.org")
    first = client.get(inbox)
    assert "Page 1 of 2" in first.text
    assert "Page 2 of 2" in client.get(inbox, {"page": 2}).text


def test_bulk_actions(people, alice_ticket):
    other = ticket_open(actor=people["bob"], subject="Printer", body="x")
    client = login(people["sam"])
    client.post(
        reverse("tickets:inbox"), {"ticket": [alice_ticket.pk, other.pk], "action": "assign_me"}
    )
    client.post(reverse("tickets:inbox"), {"ticket": [other.pk], "action": "solved"})
    alice_ticket.refresh_from_db()
    other.refresh_from_db()
    assert alice_ticket.assignee == other.assignee == people["sam"]
    assert other.status == TicketStatus.SOLVED
    assert other.solved_at
    assert alice_ticket.status == TicketStatus.NEW
    client.post(reverse("tickets:inbox"), {"ticket": [other.pk], "action": "tag", "value": "Wifi"})
    other.refresh_from_db()
    assert other.tags == ["wifi"]


@pytest.mark.parametrize(
    ("next_url", "lands"),
    [
        ("/support/tickets/?status=open", "/support/tickets/?status=open"),
        ("https://evil.example/phish", None),
        ("//evil.example/phish", None),
        ("javascript:alert(1)", None),
    ],
)
def test_bulk_action_returns_only_to_a_local_page(people, alice_ticket, next_url, lands):
    response = login(people["sam"]).post(
        reverse("tickets:inbox"),
        {"ticket": [alice_ticket.pk], "action": "assign_me", "next": next_url},
    )
    assert response.status_code == 302
    assert response.url == (lands or reverse("tickets:inbox"))


def test_without_canned_responses_the_reply_form_says_how_to_add_one(people, alice_ticket):
    url = reverse("tickets:ticket_detail", args=[alice_ticket.pk])
    page = login(people["sam"]).get(url).text
    assert "No canned responses yet: an admin can add them" in page
    admin = login(UserFactory(roles=["admin"])).get(url).text
    assert reverse("admin:tickets_cannedresponse_add") in admin
    CannedResponse.objects.create(title="Restart", body="Hello")
    assert 'data-testid="no-canned"' not in login(people["sam"]).get(url).text


def test_canned_response_fills_placeholders(people, alice_ticket):
    canned = CannedResponse.objects.create(
        title="Restart", body="Hello {first_name}, about {ticket_number}: restart. {unknown}"
    )
    response = login(people["sam"]).get(
        reverse("tickets:canned_fill", args=[alice_ticket.pk]),
        {"canned": canned.pk},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert f"Hello Alice, about #{alice_ticket.pk}: restart. {{unknown}}" in response.text
    assert 'id="reply-body"' in response.text


def test_quarantine_page_shows_raw_and_dismisses(people):
    mail = InboundMail.objects.create(
        raw=b"Subject: x\r\n\r\nbroken body",
        size=20,
        status="quarantined",
        error="broken MIME structure",
    )
    client = login(people["sam"])
    page = client.get(reverse("tickets:quarantine"), {"show": mail.pk})
    assert "broken MIME structure" in page.text
    assert "broken body" in page.text
    client.post(reverse("tickets:quarantine"), {"mail": mail.pk, "action": "dismiss"})
    mail.refresh_from_db()
    assert mail.status == "dismissed"
    assert mail.handled_by == people["sam"]


def _axis_texts(svg: str) -> list[str]:
    return re.findall(r'<text[^>]*class="axis[^"]*"[^>]*>([^<]*)</text>', svg)


def test_stats_page_shows_the_numbers_in_minutes_and_local_dates(people, alice_ticket):
    """Three tickets answered after 10, 20 and 95 minutes (and Alice's, not answered yet):
    the page reads 4 new, 4 open, a median first response of 20 minutes, on whole-number axes
    under today's date as the reader's locale writes it."""
    from django.utils import formats, timezone, translation

    now = timezone.now()
    for minutes in (10, 20, 95):
        ticket = ticket_open(actor=people["bob"], subject="slow", body="since noon")
        Ticket.objects.filter(pk=ticket.pk).update(
            created_at=now, first_response_at=now + timedelta(minutes=minutes)
        )
    client = login(people["sam"])
    page = client.get(reverse("tickets:stats")).text
    summary = page.split('data-testid="stats-summary"', 1)[1].split("</dl>", 1)[0]
    assert re.findall(r"<dd>([^<]*)</dd>", summary) == ["4", "4", "20 minutes"]

    new_svg, open_svg, response_svg = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    today = formats.date_format(timezone.localdate(), "j M")
    assert _axis_texts(new_svg)[:6] == ["tickets", "0", "1", "2", "3", "4"]
    assert _axis_texts(new_svg)[-1] == today  # the newest day is labelled, "25 Nov"
    assert _axis_texts(response_svg)[:6] == ["minutes", "0", "5", "10", "15", "20"]
    assert f"<title>{today}: 20 minutes</title>" in response_svg
    assert f"<title>{today}: 4 tickets</title>" in open_svg
    table_today = formats.date_format(timezone.localdate(), "SHORT_DATE_FORMAT")
    row = page.split(f"<tr><td>{table_today}</td>", 1)[1].split("</tr>", 1)[0]
    assert re.findall(r"<td>([^<]*)</td>", row) == ["4", "4", "20"]

    german = client.get(reverse("tickets:stats"), HTTP_ACCEPT_LANGUAGE="de").text
    with translation.override("de"):
        heute = formats.date_format(timezone.localdate(), "j. M")
        tag = formats.date_format(timezone.localdate(), "SHORT_DATE_FORMAT")
    assert "20 Minuten" in german
    assert f"<title>{heute}: 20 Minuten</title>" in german
    assert f"<tr><td>{tag}</td>" in german


def test_ticket_page_of_a_ticket_linked_to_an_incident(people, alice_ticket):
    from apps.tickets.services import incident_declare

    incident_declare(actor=people["sam"], title="Uplink", keywords=["game server"])
    alice_ticket.incident = Incident.objects.get()
    alice_ticket.save()
    CannedResponse.objects.create(title="Restart", body="x")
    page = login(people["sam"]).get(reverse("tickets:ticket_detail", args=[alice_ticket.pk]))
    assert page.status_code == 200
    assert "Uplink" in page.text
    assert "Restart" in page.text


def test_attachments_download_only_for_who_may_see_the_ticket(people, alice_ticket):
    from apps.tickets.models import Attachment

    message = alice_ticket.messages.get(kind=MessageKind.INBOUND)
    attachment = Attachment.objects.create(
        message=message,
        filename="evil.html",
        content_type="text/html",
        size=20,
        data=b"<script>x</script>",
    )
    url = reverse("tickets:attachment", args=[attachment.pk])
    own = login(people["alice"]).get(url)
    assert own.status_code == 200
    assert own["Content-Type"] == "application/octet-stream"
    assert own["Content-Disposition"].startswith("attachment;")
    assert own.content == b"<script>x</script>"
    assert login(people["bob"]).get(url).status_code == 404
    assert login(people["sam"]).get(url).status_code == 200
    page = login(people["sam"]).get(reverse("tickets:ticket_detail", args=[alice_ticket.pk]))
    assert url in page.text


@pytest.mark.parametrize("language", ["en", "de"])
def test_ticket_form_labels_have_no_colon_like_every_other_form(people, alice_ticket, language):
    pages = [
        (people["alice"], reverse("tickets:my_tickets")),
        (people["alice"], reverse("tickets:my_ticket", args=[alice_ticket.pk])),
        (people["sam"], reverse("tickets:ticket_detail", args=[alice_ticket.pk])),
        (people["sam"], reverse("tickets:incident_list")),
    ]
    for user, url in pages:
        client = login(user)
        client.cookies["django_language"] = language
        page = client.get(url, HTTP_ACCEPT_LANGUAGE=language).text
        labels = re.findall(r"<label[^>]*>([^<]+)</label>", page)
        assert labels, url
        assert [text for text in labels if text.strip().endswith(":")] == [], url
