"""The member's network context beside a ticket, and incidents that name real buildings."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.members.models import Building
from apps.tickets.models import Incident, Ticket
from apps.tickets.services import incident_declare, ticket_open
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def support():
    return UserFactory(username="sam", roles=["support"])


@pytest.fixture
def member():
    user = UserFactory(first_name="Lea", last_name="Berg", email="lea@uni.example")
    return member_active(user=user)


def _short(moment) -> str:
    from django.utils import formats, timezone

    return formats.date_format(timezone.localtime(moment), "SHORT_DATE_FORMAT")


def _page(client, support, ticket):
    client.force_login(support)
    response = client.get(reverse("tickets:ticket_detail", args=[ticket.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_panel_shows_room_status_addresses_devices_and_incidents(client, support, member):
    laptop = device_add(member, name="laptop", mac="02:aa:00:00:00:01")
    ticket = ticket_open(actor=member.user, subject="Slow", body="Very slow today")
    incident = incident_declare(
        actor=support, title="Switch in the basement", buildings=[member.room.building]
    )
    elsewhere = incident_declare(actor=support, title="Mail delays", affected=["mail"])
    page = _page(client, support, ticket)
    panel = page[page.index('data-testid="member-context"') :]
    assert member.room.label in panel
    assert member.room.building.name in panel
    assert "badge-active" in panel
    assert member.public_ipv4.address in panel
    for value in ("laptop", laptop.mac, laptop.ipv4, laptop.ipv6):
        assert value in panel
    assert incident.title in panel
    assert elsewhere.title in panel
    assert "this member&#x27;s building" in panel or "this member's building" in panel
    # The member's building first.
    assert panel.index(incident.title) < panel.index(elsewhere.title)
    # The forwards and firewall blocks are there (filled in the test below).
    assert 'id="context-port-forwards"' in panel
    assert 'id="context-firewall-health"' in panel


def test_panel_for_a_test_access_and_for_a_bare_address(client, support, member):
    from datetime import timedelta

    from django.utils import timezone

    from apps.testaccess.services import member_test_access_grant
    from tests.factories import MemberFactory

    pending = MemberFactory(user=UserFactory(first_name="Tom", last_name="Test"))
    member_test_access_grant(
        member=pending, until=timezone.localdate() + timedelta(days=5), actor=support
    )
    ticket = ticket_open(actor=pending.user, subject="Speed", body="Why so slow?")
    panel = _page(client, support, ticket)
    assert "Test access until" in panel
    bare = Ticket.objects.create(requester_email="x@example.org", subject="Hi")
    assert "No member account matches" in _page(client, support, bare)


def test_ticket_page_query_count_does_not_grow(
    client, support, member, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.dhcp.walled import registration_networks_forget
    from apps.network.models import NetworkSettings

    NetworkSettings.objects.update_or_create(id=1, defaults={"device_limit": 20})
    device_add(member)
    ticket = ticket_open(actor=member.user, subject="Hi", body="One device")
    incident_declare(actor=support, title="One", buildings=[member.room.building])
    client.force_login(support)
    url = reverse("tickets:ticket_detail", args=[ticket.pk])
    client.get(url)
    # The walled garden re-reads its ranges every 10 s: both requests read them (on a loaded
    # machine the eight changes below can take longer than that).
    registration_networks_forget()
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    for n in range(8):
        device_add(member)
        incident_declare(actor=support, title=f"More {n}", buildings=[member.room.building])
    registration_networks_forget()
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get(url).content.decode()
    assert page.count("<code>02:00:00") >= 9


def test_ticket_from_a_member_in_an_affected_building_is_linked(support, member):
    incident = incident_declare(
        actor=support, title="House down", buildings=[member.room.building], keywords=["xyzzy"]
    )
    ticket = ticket_open(actor=member.user, subject="Printer", body="Nothing to do with it")
    assert ticket.incident == incident
    other = member_active()
    assert other.room.building != member.room.building
    unrelated = ticket_open(actor=other.user, subject="Printer", body="paper")
    assert unrelated.incident is None


def test_declaring_links_earlier_tickets_of_the_building(support, member):
    from datetime import timedelta

    from django.utils import timezone

    ticket = ticket_open(actor=member.user, subject="Dead", body="nothing works")
    incident = incident_declare(
        actor=support,
        title="House down",
        buildings=[member.room.building],
        started_at=timezone.now() - timedelta(hours=1),
    )
    ticket.refresh_from_db()
    assert ticket.incident == incident


def test_ended_incident_links_nothing(support, member):
    from apps.tickets.services import incident_end

    incident = incident_declare(actor=support, title="Over", buildings=[member.room.building])
    incident_end(incident=incident, actor=support)
    ticket = ticket_open(actor=member.user, subject="Dead", body="nothing works")
    assert ticket.incident is None


def test_mail_from_a_member_in_an_affected_building_is_linked(listener, transactional_db, settings):
    from tests.integration.tickets.conftest import make_mail

    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = ["mx.dorm.example"]
    staff = UserFactory(username="sam2", roles=["support"])
    member = member_active(user=UserFactory(email="resident@uni.example"))
    incident = incident_declare(actor=staff, title="Outage", buildings=[member.room.building])
    passed = "mx.dorm.example; spf=pass smtp.mailfrom=resident@uni.example"
    listener.send(
        make_mail(subject="Question", sender="resident@uni.example", Authentication_Results=passed)
    )
    assert Ticket.objects.get(requester_email="resident@uni.example").incident == incident


def test_incident_form_and_api_take_buildings(client, support, member):
    building = member.room.building
    client.force_login(support)
    response = client.post(
        reverse("tickets:incident_list"),
        {
            "title": "Form incident",
            "severity": "major",
            "buildings": [building.pk],
            "affected": "Wi-Fi",
            "keywords": "",
            "started_at": "2020-01-01T00:00",
            "public": "on",
        },
    )
    assert response.status_code == 302
    incident = Incident.objects.get(title="Form incident")
    assert list(incident.buildings.all()) == [building]
    assert incident.affected == ["Wi-Fi"]
    api = client.post(
        "/api/incidents/",
        {"title": "API incident", "buildings": [building.code], "affected": ["mail"]},
        content_type="application/json",
    )
    assert api.status_code == 201, api.content
    assert api.json()["buildings"] == [building.code]
    assert client.get("/api/incidents/").json()["results"][0]["buildings"] == [building.code]


def test_status_page_names_the_buildings(client, support, member):
    building: Building = member.room.building
    incident_declare(actor=support, title="Public outage", buildings=[building])
    page = client.get("/status/").content.decode()
    assert building.name in page


def test_panel_shows_forwards_with_their_live_state_and_firewall_health(client, support, member):
    from apps.firewall.models import FirewallHost
    from apps.health.models import HostHealthSample
    from tests.factories import forward_add

    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    HostHealthSample.objects.create(
        host=host, reachable=True, conntrack_count=950, conntrack_max=1000, softirq_max_share=0.1
    )
    forward_add(member, ports="25565")
    ticket = ticket_open(actor=member.user, subject="Minecraft", body="Nobody can join")
    panel = _page(client, support, ticket)
    panel = panel[panel.index('id="context-port-forwards"') :]
    assert "TCP 25565" in panel  # the protocol by its name (TCP and UDP for both)
    assert 'data-state="pending"' in panel
    health = panel[panel.index('id="context-firewall-health"') :]
    assert "pl-nat1" in health
    assert "Connection tracking table 95% full." in health


def test_the_open_incidents_panel_stays_short_after_an_outage(client, support, member):
    ticket = ticket_open(actor=member.user, subject="Down", body="Nothing works")
    mine = incident_declare(actor=support, title="Our house", buildings=[member.room.building])
    for n in range(7):
        incident_declare(actor=support, title=f"Elsewhere {n}", affected=["mail"])
    page = _page(client, support, ticket)
    panel = page.split('data-testid="context-incidents"', 1)[1].split("</section>", 1)[0]
    assert panel.count("<li>") == 5
    assert mine.title in panel  # the member's own building first
    assert "and 3 more open incidents" in panel
    assert reverse("tickets:incident_list") in panel


def test_panel_reads_right_for_pending_and_ended_members_and_their_hosts(client, support):
    from apps.firewall.models import FirewallHost
    from apps.members.services import member_end
    from tests.factories import member_registered

    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    pending = member_registered(first_name="Pia", last_name="Neu")
    ticket = ticket_open(actor=pending.user, subject="When?", body="Still no internet")
    panel = _page(client, support, ticket)
    panel = panel[panel.index('data-testid="member-context"') :]
    dates = panel[panel.index('data-testid="context-dates"') :].split("</dd>")[0]
    registered = _short(pending.registered_at)
    assert registered in dates
    assert "not checked in yet" in dates
    assert "Member since" not in panel
    # The host's name and its badge, no colon between them; the address wraps at @ and dots.
    assert ">pl-nat1</a>: " not in panel
    email = pending.user.email
    assert email.replace("@", "@<wbr>").replace(".", "<wbr>.") in panel

    ended = member_active(user=UserFactory(first_name="Ole", last_name="Alt"))
    member_end(member=ended, actor=support, note="moved out")
    old = ticket_open(actor=ended.user, subject="Deposit", body="Anything left?")
    panel = _page(client, support, old)
    dates = panel[panel.index('data-testid="context-dates"') :].split("</dd>")[0]
    ended.refresh_from_db()
    assert f"from {_short(ended.checked_in_at)} to {_short(ended.ended_at)}" in dates
    assert "Member since" not in panel


def test_staff_see_the_members_devices_not_your_devices(client, support, member):
    from apps.members.services import member_end

    client.force_login(UserFactory(username="vic", roles=["volunteer"]))
    page = client.get(reverse("members:member_detail", args=[member.pk])).text
    assert "your devices" not in page
    assert "the member&#x27;s devices" in page or "the member's devices" in page
    member_end(member=member, actor=support, note="moved out")
    page = client.get(reverse("members:member_detail", args=[member.pk])).text
    assert "Add one below" not in page
    assert "No devices: the membership has ended." in page
    # The member reads "your" on their own page.
    client.force_login(member.user)
    own = client.get(reverse("members:dashboard")).text
    assert "your devices" in own
