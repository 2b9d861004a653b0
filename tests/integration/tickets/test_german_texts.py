"""Issue 25: incident titles and updates, and canned responses, get a German text beside the
English one: the staff forms have fields for them; the status page, the member banner, the
member's notice and the staff pages pick by language, with the English text as fallback."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from apps.notifications.models import Notice, Preference
from apps.notifications.services import incident_notices_create
from apps.notifications.texts import notice_text
from apps.tickets.models import CannedResponse, Incident, IncidentUpdate
from apps.tickets.services import ticket_open
from apps.tickets.status import status_cache_clear
from tests.factories import MemberFactory, UserFactory, member_active

pytestmark = pytest.mark.django_db
DE = {"HTTP_ACCEPT_LANGUAGE": "de"}


@pytest.fixture(autouse=True)
def _no_cached_status_page():
    status_cache_clear()
    yield
    status_cache_clear()


@pytest.fixture
def support():
    client = Client()
    client.force_login(UserFactory(roles=["support"]))
    return client


def declare(support: Client, **extra: str) -> Incident:
    data = {
        "title": "Building B offline",
        "title_de": "Haus B offline",
        "description": "We are looking into it.",
        "description_de": "Wir sehen uns das an.",
        "severity": "major",
        "public": "on",
    }
    form = support.get(reverse("tickets:incident_list")).content.decode()
    started = form.split('name="started_at" value="', 1)[1].split('"', 1)[0]
    response = support.post(
        reverse("tickets:incident_list"), {**data, "started_at": started, **extra}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    return Incident.objects.get()


def test_the_staff_forms_take_german_texts_and_every_page_picks_by_language(support):
    form = support.get(reverse("tickets:incident_list")).content.decode()
    assert 'name="title_de"' in form
    assert 'name="description_de"' in form
    incident = declare(support)
    assert incident.title_de == "Haus B offline"
    assert incident.updates.get().body_de == "Wir sehen uns das an."
    detail = reverse("tickets:incident_detail", args=[incident.pk])
    assert 'name="body_de"' in support.get(detail).content.decode()
    response = support.post(
        reverse("tickets:incident_update", args=[incident.pk]),
        {"phase": "identified", "body": "A switch failed.", "body_de": "Ein Switch ist defekt."},
    )
    assert response.status_code == 302
    assert IncidentUpdate.objects.filter(body_de="Ein Switch ist defekt.").exists()
    support.post(  # an update written in English only: German readers read it in English
        reverse("tickets:incident_update", args=[incident.pk]),
        {"phase": "monitoring", "body": "Replaced, watching."},
    )
    status_cache_clear()

    status = reverse("tickets:status_page")
    english = Client().get(status).content.decode()
    assert "Building B offline" in english
    assert "A switch failed." in english
    assert "Haus B offline" not in english
    german = Client().get(status, **DE).content.decode()
    assert "Haus B offline" in german
    assert "Ein Switch ist defekt." in german
    assert "A switch failed." not in german
    assert "Replaced, watching." in german  # the fallback

    member = member_active()
    resident = Client()
    resident.force_login(member.user)
    banner = resident.get(reverse("members:dashboard"), **DE).content.decode()
    assert "Haus B offline" in banner
    assert "Building B offline" in resident.get(reverse("members:dashboard")).content.decode()

    staff_list = support.get(reverse("tickets:incident_list"), **DE).content.decode()
    assert "Haus B offline" in staff_list
    assert "Building B offline" in support.get(reverse("tickets:incident_list")).content.decode()


def test_the_members_notice_of_an_incident_is_in_their_language(support):
    incident = declare(support)
    member = member_active()
    incident.buildings.add(member.room.building)
    Notice.objects.all().delete()
    assert incident_notices_create(incident_id=incident.pk) >= 1
    notice = Notice.objects.get(member=member)
    with translation.override("de"):
        title, body = notice_text(notice)
    assert "Haus B offline" in title
    assert "Wir sehen uns das an." in body
    with translation.override("en"):
        title, body = notice_text(notice)
    assert "Building B offline" in title
    assert "We are looking into it." in body


@pytest.mark.parametrize(
    ("language", "present", "absent"),
    [
        ("de", ["Hallo Ann, bitte neu starten."], ["Hello Ann"]),
        ("en", ["Hello Ann, please restart."], ["Hallo"]),
        ("", ["Hello Ann, please restart.", "Hallo Ann, bitte neu starten."], []),
    ],
)
def test_a_canned_response_fills_in_the_requesters_language(support, language, present, absent):
    member = MemberFactory(user__first_name="Ann")
    if language:
        Preference.objects.create(member=member, language=language)
    ticket = ticket_open(actor=member.user, subject="offline", body="No internet")
    canned = CannedResponse.objects.create(
        title="Restart",
        body="Hello {first_name}, please restart.",
        body_de="Hallo {first_name}, bitte neu starten.",
    )
    text = support.get(
        reverse("tickets:canned_fill", args=[ticket.pk]),
        {"canned": canned.pk},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    for part in present:
        assert part in text
    for part in absent:
        assert part not in text
    english_only = CannedResponse.objects.create(title="Wait", body="Please wait.")
    text = support.get(
        reverse("tickets:canned_fill", args=[ticket.pk]),
        {"canned": english_only.pk},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert "Please wait." in text


def test_the_canned_response_admin_form_has_the_german_text():
    admin = Client()
    admin.force_login(UserFactory(roles=["admin"], is_staff=True, is_superuser=True))
    page = admin.get(reverse("admin:tickets_cannedresponse_add"))
    assert page.status_code == 200
    assert 'name="body_de"' in page.content.decode()
