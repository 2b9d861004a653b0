"""A person takes over an incident (often one an alert opened): edit it, merge two."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditEntry
from apps.tickets.models import Incident, Ticket
from apps.tickets.services import incident_declare
from tests.factories import BuildingFactory, MemberFactory, RoomFactory


@pytest.fixture
def support(client_for):
    return client_for("support")


@pytest.mark.django_db
def test_editing_an_incident_changes_its_texts_and_links_tickets_of_added_buildings(support):
    first, second = BuildingFactory(), BuildingFactory()
    incident = incident_declare(actor=None, title="Firewalls down", buildings=[first])
    requester = MemberFactory(room=RoomFactory(building=second)).user
    ticket = Ticket.objects.create(subject="No net", requester=requester)
    response = support.post(
        f"/support/incidents/{incident.pk}/edit/",
        {"title": "Uplink down", "title_de": "Uplink ausgefallen", "buildings": [first.pk, second.pk],
         "public": "on"},
    )  # fmt: skip
    assert response.status_code == 302
    incident.refresh_from_db()
    assert (incident.title, incident.title_de) == ("Uplink down", "Uplink ausgefallen")
    assert set(incident.buildings.all()) == {first, second}
    ticket.refresh_from_db()
    assert ticket.incident == incident
    entry = AuditEntry.objects.get(action="incident.edit")
    assert entry.actor_name != "system"
    assert "title" in entry.changes["detail"][1]
    de = support.get("/status/", headers={"Accept-Language": "de"}).content.decode()
    assert "Uplink ausgefallen" in de


@pytest.mark.django_db
def test_an_edit_without_a_title_is_refused_and_changes_nothing(support):
    incident = incident_declare(actor=None, title="Firewalls down")
    response = support.post(f"/support/incidents/{incident.pk}/edit/", {"title": " "})
    assert response.status_code == 400  # the page again, with the error
    assert "This field is required." in response.content.decode()
    incident.refresh_from_db()
    assert incident.title == "Firewalls down"


@pytest.mark.django_db
def test_merging_moves_tickets_and_buildings_and_ends_the_source(support, client_for):
    one, two = BuildingFactory(), BuildingFactory()
    target = incident_declare(actor=None, title="Site north down", buildings=[one])
    source = incident_declare(actor=None, title="DHCP north", buildings=[two])
    ticket = Ticket.objects.create(subject="x", incident=source)
    response = support.post(f"/support/incidents/{source.pk}/merge/", {"target": target.pk})
    assert response.status_code == 302
    assert response["Location"].endswith(f"/{target.pk}/")
    source.refresh_from_db()
    ticket.refresh_from_db()
    assert source.ended_at is not None
    assert source.updates.first().body == f"Continued in incident #{target.pk}."
    assert ticket.incident == target
    assert set(target.buildings.all()) == {one, two}
    # Into itself or into an ended incident: refused, nothing changes.
    refused = support.post(f"/support/incidents/{target.pk}/merge/", {"target": source.pk})
    assert refused.status_code == 400
    assert Incident.objects.get(pk=target.pk).ended_at is None
    member = client_for("member").post(f"/support/incidents/{target.pk}/merge/", {"target": 1})
    assert member.status_code in (403, 404)
