"""Support staff work the inbox from the keyboard: j/k move, o/Enter open, / searches."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.tickets.models import Ticket
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_inbox_keyboard_shortcuts(django_db_setup, page, login):
    UserFactory(username="kai", roles=["support"])
    now = timezone.now()
    # Newest message first in the inbox: Alpha, Beta, Gamma.
    tickets = {}
    for n, subject in enumerate(["Alpha outage", "Beta router", "Gamma wifi"]):
        tickets[subject] = Ticket.objects.create(
            requester_email=f"p{n}@example.org",
            subject=subject,
            last_message_at=now - timedelta(minutes=n),
        )
    login("kai", PASSWORD)
    page.goto("/support/tickets/")
    rows = page.locator("tr[data-ticket-row]")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("Alpha outage")
    current = page.locator("tr[data-ticket-row].is-current")
    expect(current).to_have_count(0)

    page.keyboard.press("j")
    expect(current).to_contain_text("Alpha outage")
    page.keyboard.press("j")
    expect(current).to_contain_text("Beta router")
    page.keyboard.press("j")
    page.keyboard.press("j")  # stays on the last row
    expect(current).to_contain_text("Gamma wifi")
    page.keyboard.press("k")
    expect(current).to_contain_text("Beta router")
    expect(current).to_have_count(1)

    page.keyboard.press("o")
    expect(page).to_have_url(re.compile(rf"/support/tickets/{tickets['Beta router'].pk}/$"))
    expect(page.get_by_role("heading", name=re.compile("Beta router"))).to_be_visible()

    page.go_back()
    expect(rows).to_have_count(3)
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/support/tickets/{tickets['Alpha outage'].pk}/$"))

    page.go_back()
    search = page.locator("#inbox-search")
    expect(search).not_to_be_focused()
    page.keyboard.press("/")
    expect(search).to_be_focused()
    expect(search).to_have_value("")  # the slash itself is not typed
    page.keyboard.type("gamma")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Gamma wifi")
    # While typing in the box, j and k are letters, not shortcuts.
    page.keyboard.type(" jk")
    expect(search).to_have_value("gamma jk")
    expect(current).to_have_count(0)
