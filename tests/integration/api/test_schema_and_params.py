"""API: refused parameters are 400 with the parameter's name (never a 500, never ignored), and
the schema says what the endpoints answer (pages, nullable fields, enums)."""

import pytest
from django.urls import reverse

from apps.members.models import Building
from apps.network.models import Ipv6Opening
from apps.tickets.models import Incident, Ticket
from apps.tickets.services import ticket_open
from tests.factories import device_add, member_active
from tests.integration.api.helpers import login

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("param", ["ipv4", "ipv6"])
def test_a_device_address_filter_that_is_no_address_is_400(make_user, param):
    member = member_active()
    device = device_add(member)
    staff = login(make_user(roles=("volunteer",)))
    response = staff.get("/api/devices/", {param: "x"})
    assert response.status_code == 400
    assert response.json()[param]
    wrong_family = staff.get("/api/devices/", {param: "::1" if param == "ipv4" else "10.0.0.1"})
    assert wrong_family.status_code == 400
    found = staff.get("/api/devices/", {param: str(getattr(device, param))}).json()
    assert [d["id"] for d in found["results"]] == [device.pk]


@pytest.mark.parametrize(
    ("role", "url", "param"),
    [
        ("support", "/api/tickets/", "search"),
        ("support", "/api/tickets/", "tag"),
        ("member", "/api/devices/", "building"),
        ("member", "/api/members/", "email"),
    ],
)
def test_a_nul_byte_in_an_api_parameter_is_400_naming_it(make_user, role, url, param):
    client = login(make_user(roles=(role,)))
    response = client.get(url, {param: "a\x00b"})
    assert response.status_code == 400
    assert "NUL" in response.json()[param][0]


@pytest.mark.parametrize(
    ("role", "url", "param"),
    [
        ("support", "tickets:inbox", "q"),
        ("support", "tickets:inbox", "search"),
        ("volunteer", "members:office_hours", "q"),
        ("member", "tickets:my_tickets", "q"),
    ],
)
def test_a_nul_byte_in_a_page_search_is_a_400_page(make_user, role, url, param):
    client = login(make_user(roles=(role,)))
    response = client.get(reverse(url), {param: "A-1\x00"})
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_a_nul_byte_in_the_incidents_buildings_is_400_and_nothing_declared(make_user):
    Building.objects.create(code="A", name="A")
    support = login(make_user(roles=("support",)))
    response = support.post(
        "/api/incidents/",
        {"title": "Outage", "buildings": ["A\x00"]},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["buildings"]
    page = support.post(
        reverse("tickets:incident_list"), {"title": "Outage", "buildings": ["A\x00"]}
    )
    assert page.status_code == 400
    assert not Incident.objects.exists()


@pytest.mark.parametrize("ports", ["", None])
def test_empty_ports_on_an_ipv6_opening_mean_all_ports_as_documented(ports):
    member = member_active()
    device = device_add(member)
    response = login(member.user).post(
        "/api/ipv6-openings/",
        {"device": device.pk, "protocol": "both", "ports": ports},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["all_ports"] is True
    assert response.json()["ports"] == ""
    assert Ipv6Opening.objects.get().port_first is None


def test_empty_ports_with_one_protocol_is_400_with_the_field():
    member = member_active()
    device = device_add(member)
    response = login(member.user).post(
        "/api/ipv6-openings/",
        {"device": device.pk, "protocol": "tcp", "ports": ""},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "choose both or give ports" in response.json()["protocol"][0]
    assert not Ipv6Opening.objects.exists()


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/tickets/", {"status": "bogus"}, "status"),
        ("/api/tickets/", {"assignee": "someone"}, "assignee"),
        ("/api/tickets/", {"stauts": "open"}, "stauts"),
        ("/api/incidents/", {"current": "maybe"}, "current"),
        ("/api/devices/", {"member": "x"}, "member"),
        ("/api/devices/", {"colour": "red"}, "colour"),
        ("/api/firewalls/", {"site": "x"}, "site"),
        ("/api/notices/", {"page": "0"}, "page"),
    ],
)
def test_invalid_or_unknown_query_parameters_are_refused(make_user, url, params, field):
    client = login(make_user(roles=("admin",)))
    response = client.get(url, params)
    assert response.status_code == 400
    assert response.json()[field]


def test_valid_ticket_filters_still_filter(make_user):
    member = member_active()
    ticket = ticket_open(actor=member.user, subject="Wifi down", body="no signal")
    support = login(make_user(roles=("support",)))
    found = support.get("/api/tickets/", {"status": "active", "search": "signal"}).json()
    assert [t["id"] for t in found["results"]] == [ticket.pk]
    assert support.get("/api/tickets/", {"assignee": "none", "page": 1}).json()["count"] == 1
    assert support.get("/api/devices/", {"format": "json"}).status_code == 200
    assert Ticket.objects.count() == 1


def test_the_schema_documents_pages_nullable_fields_and_enums(make_user):
    schema = login(make_user(roles=("member",))).get("/api/schema/?format=json").json()
    paths, components = schema["paths"], schema["components"]["schemas"]

    def ok_schema(path):
        content = paths[path]["get"]["responses"]["200"]["content"]["application/json"]
        ref = content["schema"].get("$ref", "")
        return components[ref.rsplit("/", 1)[-1]] if ref else content["schema"]

    for path in ["/api/tickets/", "/api/incidents/", "/api/notices/", "/api/devices/"]:
        page = ok_schema(path)
        assert {"count", "next", "previous", "results"} <= set(page["properties"]), path
    ticket = components["TicketListOutput"]["properties"]
    assert ticket["assignee"].get("nullable") is True
    assert ticket["queue"].get("nullable") is True
    params = {p["name"]: p for p in paths["/api/tickets/"]["get"]["parameters"]}
    assert "active" in params["status"]["schema"]["enum"]
