"""Support journey: declare an incident, see its tickets, answer them all at once."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from playwright.sync_api import expect

from apps.tickets.mailparse import parse_mail
from apps.tickets.models import Ticket
from apps.tickets.services import mail_ingest
from apps.tickets.status import STALE_KEY, status_cache_clear
from tests.factories import PASSWORD, BuildingFactory, UserFactory
from tests.integration.tickets.conftest import eager_tasks, make_mail, running_sink

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def smtp_sink(settings):
    """Outbound mail to a real SMTP sink in this process; Celery tasks run eagerly."""
    with eager_tasks(), running_sink(settings) as handler:
        yield handler
    cache.delete(STALE_KEY)  # leave no incident banner behind for other tests
    status_cache_clear()


def test_support_declares_incident_sees_linked_tickets_and_replies_to_all(
    django_db_setup,  # first: the database exists before Playwright's loop starts
    page,
    login,
    smtp_sink,
    settings,
):
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    status_cache_clear()
    UserFactory(username="sam", first_name="Sam", roles=["support"])
    building = BuildingFactory(code="B", name="House B")
    for n, who in enumerate(["Ana", "Ben", "Cem"]):
        raw = make_mail(
            subject=f"Internet offline in B{n}", sender=f"{who} <{who.lower()}@example.org>"
        )
        mail_ingest(parsed=parse_mail(raw.as_bytes(), envelope_from=f"{who.lower()}@example.org"))
    mail_ingest(
        parsed=parse_mail(make_mail(subject="Printer", sender="dan@example.org").as_bytes())
    )

    login("sam", PASSWORD)
    page.get_by_role("link", name="Support", exact=True).click()
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    expect(page.get_by_test_id("ticket-table")).to_contain_text("Internet offline in B2")

    page.get_by_role("link", name="Incidents", exact=True).click()
    page.get_by_label("Title", exact=True).fill("Building B offline")
    page.get_by_label("Affected buildings").select_option(label=str(building))
    page.get_by_label("Affected services").fill("Uplink")
    page.get_by_label("Keywords").fill("offline")
    page.get_by_label("First public update", exact=True).fill("The uplink of building B is down.")
    page.get_by_test_id("declare").click()

    expect(page.get_by_role("heading", name="Building B offline")).to_be_visible()
    linked = page.get_by_test_id("linked-tickets")
    expect(page.get_by_role("heading", name="3 linked tickets")).to_be_visible()
    for n in range(3):
        expect(linked).to_contain_text(f"Internet offline in B{n}")
    expect(linked).not_to_contain_text("Printer")

    page.get_by_label("Reply in English").fill(
        "{greeting} the uplink is back. Your ticket: {ticket_number}."
    )
    page.get_by_test_id("mass-reply").click()
    preview = page.get_by_test_id("mass-reply-preview")
    expect(preview).to_contain_text("Preview: this goes to 3 tickets")
    expect(preview.get_by_test_id("mass-reply-example")).to_contain_text("Hello Ana, the uplink")
    expect(page.get_by_test_id("broadcasts")).to_have_count(0)  # nothing sent yet
    page.get_by_test_id("mass-reply-confirm").click()
    expect(page.locator(".messages")).to_contain_text("Reply queued for 3 tickets.")
    expect(page.get_by_test_id("broadcasts")).to_contain_text("3 of 3 mailed")

    mails = smtp_sink.wait_for(3)
    assert sorted(m["To"] for m in mails) == [
        "ana@example.org",
        "ben@example.org",
        "cem@example.org",
    ]
    for mail in mails:
        ticket = Ticket.objects.get(requester_email=mail["To"])
        assert mail["In-Reply-To"] == ticket.messages.first().message_id
        assert f"Your ticket: #{ticket.pk}." in mail.get_content()
        assert ticket.status == "waiting"

    # Members see the incident on the public status page, without logging in.
    page.context.clear_cookies()
    page.goto("/status/")
    expect(page.get_by_test_id("current-incident")).to_contain_text("Building B offline")
    expect(page.get_by_test_id("current-incident")).to_contain_text("uplink of building B")
    expect(page.get_by_test_id("current-incident")).to_contain_text("Buildings: House B")
    expect(page).to_have_url(re.compile(r"/status/$"))
