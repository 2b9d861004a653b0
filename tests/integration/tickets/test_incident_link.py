"""Incident pickers name each incident by number, start day and title; linking tickets by hand
takes ranges (334-353) and says which numbers name no ticket."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import formats, timezone

from apps.tickets.forms import LINK_MAX_TICKETS, LinkForm
from apps.tickets.models import Incident, Ticket
from apps.tickets.services import incident_declare, ticket_open
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def sam():
    return UserFactory(username="sam", roles=["support"])


@pytest.fixture
def client(sam):
    client = Client()
    client.force_login(sam)
    return client


def tickets(n: int) -> list[Ticket]:
    alice = UserFactory(username="alice", roles=["member"])
    return [ticket_open(actor=alice, subject=f"No internet {i}", body="down") for i in range(n)]


@pytest.mark.parametrize(
    ("typed", "numbers"),
    [
        ("12, 15, #17", [12, 15, 17]),
        ("334-337", [334, 335, 336, 337]),
        ("#334-#336, 12", [334, 335, 336, 12]),
        ("3 \u2013 5 7", [3, 4, 5, 7]),  # an en dash, as word processors write it
        ("5, 4-6", [5, 4, 6]),
    ],
)
def test_link_form_reads_numbers_and_ranges(typed, numbers):
    form = LinkForm({"tickets": typed})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["tickets"] == numbers


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("12, abc", "Not a ticket number or range: abc"),
        ("353-334", "The range 353-334 runs backwards"),
        (f"1-{LINK_MAX_TICKETS + 1}", f"At most {LINK_MAX_TICKETS} tickets at a time."),
    ],
)
def test_link_form_refuses_what_it_cannot_read(typed, error):
    form = LinkForm({"tickets": typed})
    assert not form.is_valid()
    assert error in form.errors["tickets"][0]


def test_linking_a_range_links_the_tickets_and_names_the_missing_numbers(client, sam):
    first, second, third = tickets(3)
    incident = incident_declare(actor=sam, title="Building B offline")
    third.incident = incident
    third.save(update_fields=["incident"])
    high = third.pk + 3
    url = reverse("tickets:incident_detail", args=[incident.pk])
    response = client.post(url, {"action": "link", "tickets": f"{first.pk}-{high}"})
    assert response.status_code == 302
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said[0] == "2 tickets linked. 1 was linked already."
    assert said[1] == (f"There are no tickets #{third.pk + 1}\u2013#{high}; they were not linked.")
    assert set(incident.tickets.values_list("pk", flat=True)) == {first.pk, second.pk, third.pk}


def test_linking_only_missing_numbers_is_refused_next_to_the_field(client, sam):
    incident = incident_declare(actor=sam, title="Building B offline")
    url = reverse("tickets:incident_detail", args=[incident.pk])
    response = client.post(url, {"action": "link", "tickets": "900-902, 950"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "There are no tickets #900\u2013#902, #950." in page
    assert 'value="900-902, 950"' in page  # what was typed stays in the box


def test_pickers_show_number_start_day_and_title(client, sam):
    (ticket,) = tickets(1)
    incident_declare(actor=sam, title="Wi-Fi down")
    incident = Incident.objects.get()
    day = formats.date_format(timezone.localtime(incident.started_at), "SHORT_DATE_FORMAT")
    label = f"#{incident.pk} · {day} · Wi-Fi down"
    detail = client.get(reverse("tickets:ticket_detail", args=[ticket.pk])).content.decode()
    assert f">{label}</option>" in detail
    inbox = client.get(reverse("tickets:inbox")).content.decode()
    assert f">{label}</option>" in inbox
    listing = client.get(reverse("tickets:incident_list")).content.decode()
    assert f"#{incident.pk}</span>" in listing


def test_bulk_link_to_a_missing_incident_changes_nothing(client, sam):
    (ticket,) = tickets(1)
    incident = incident_declare(actor=sam, title="Wi-Fi down")
    ticket.incident = incident
    ticket.save(update_fields=["incident"])
    response = client.post(
        reverse("tickets:inbox"), {"action": "incident", "value": "999", "ticket": [ticket.pk]}
    )
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said == ["There is no incident #999; no ticket was changed."]
    ticket.refresh_from_db()
    assert ticket.incident == incident  # before: a missing number unlinked the ticket
