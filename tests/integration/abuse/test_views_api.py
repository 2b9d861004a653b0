"""Who may ask (the abuse desk and admins; members, volunteers and support get 403), and the
page, API and command answering the same question, refusing bad input with the field named."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from apps.abuse.models import AbuseLookup
from apps.audit.models import AuditEntry
from apps.members.services import member_check_in
from tests.factories import device_add, member_registered, pool_create

pytestmark = pytest.mark.django_db

PAGE = reverse("abuse:lookup")
API = reverse("api-abuse-lookup")


@pytest.fixture
def ann(clock):
    pool_create()
    member = member_registered(first_name="Ann", last_name="Lee")
    member_check_in(member=member, actor=None)
    device_add(member, name="laptop")
    clock.advance(days=2)
    return member


def _form(address: str, at: str = "2026-03-03 12:00", reason: str = "CERT ticket 42") -> dict:
    return {"address": address, "at": at, "reason": reason}


@pytest.mark.parametrize("role", ["member", "volunteer", "support"])
def test_other_roles_cannot_reach_the_lookup(client_for, ann, role):
    client = client_for(role)
    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, _form(ann.public_ipv4.address)).status_code == 403
    response = client.post(API, _form(ann.public_ipv4.address), content_type="application/json")
    assert response.status_code == 403
    assert not AbuseLookup.objects.exists()


def test_anonymous_is_sent_to_log_in(client, ann):
    assert client.get(PAGE).status_code == 302
    assert client.post(API, _form("198.51.100.1"), content_type="application/json").status_code in (
        401,
        403,
    )


@pytest.mark.parametrize("role", ["abuse", "admin"])
def test_the_page_answers_with_member_devices_room_and_evidence(client_for, ann, role):
    client = client_for(role)
    page = client.get(PAGE, {"address": "198.51.100.9", "at": "2026-03-03 12:00"})
    assert page.status_code == 200
    assert "Europe/Berlin" in page.content.decode()
    assert 'value="198.51.100.9"' in page.content.decode()  # prefilled from a link
    assert not AbuseLookup.objects.exists()  # showing the form looks nothing up
    response = client.post(PAGE, _form(ann.public_ipv4.address), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-verdict="held"' in html
    assert "Ann Lee" in html
    assert ann.room.label in html
    assert "laptop" in html
    assert 'data-testid="abuse-evidence"' in html
    assert "<html" not in html  # the partial only
    assert AbuseLookup.objects.count() == 1


def test_the_page_says_nobody_and_quarantined_plainly(client_for, ann, clock):
    from apps.members.services import member_end

    client = client_for("abuse")
    html = client.post(PAGE, _form("198.51.100.200")).content.decode()
    assert 'data-verdict="nobody"' in html
    assert "Nobody held 198.51.100.200" in html
    address = ann.public_ipv4.address
    member_end(member=ann, actor=None)
    clock.advance(hours=1)
    when = (clock.now - dt.timedelta(minutes=30)).isoformat()
    html = client.post(PAGE, _form(address, at=when)).content.decode()
    assert 'data-verdict="quarantined"' in html
    assert "quarantined" in html


def test_the_page_refuses_bad_input_with_the_field_and_records_nothing(client_for, ann):
    client = client_for("abuse")
    response = client.post(PAGE, _form("10.1.2", at="yesterday", reason=""))
    html = response.content.decode()
    assert response.status_code == 422
    assert "is not an IPv4 or IPv6 address" in html or "Enter" in html
    assert "Say why you look this up" in html
    assert not AbuseLookup.objects.exists()
    assert not AuditEntry.objects.filter(action="abuse.lookup").exists()
    response = client.post(PAGE, _form("10.1.2", at="yesterday"), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200
    assert "“10.1.2” is not an IPv4 or IPv6 address." in html
    assert "“yesterday” is not a point in time." in html
    assert not AbuseLookup.objects.exists()


def test_the_page_in_german_uses_the_formal_address(client_for, ann):
    client = client_for("abuse")
    client.cookies["django_language"] = "de"
    html = client.post(PAGE, _form("10.1.2", reason="")).content.decode()
    assert "Abuse-Abfrage" in html
    assert "Sie" in html
    assert "Geben Sie an, warum Sie das nachschlagen" in html


def test_the_api_answers_and_refuses_like_the_page(client_for, ann):
    client = client_for("abuse")
    ok = client.post(API, _form(ann.public_ipv4.address), content_type="application/json")
    assert ok.status_code == 200
    body = ok.json()
    assert body["verdict"] == "held"
    assert body["member"] == {"id": ann.pk, "name": "Ann Lee (" + ann.user.username + ")"}
    assert body["room"] == ann.room.label
    assert body["time_zone"] == "Europe/Berlin"
    assert body["at"] == "2026-03-03T12:00:00+01:00"
    assert [d["name"] for d in body["devices"]] == ["laptop"]
    assert {e["kind"] for e in body["evidence"]} >= {"holding", "room_stay"}
    assert AuditEntry.objects.get(action="abuse.lookup").object_id == str(body["lookup"])

    missing = client.post(
        API,
        {"address": ann.public_ipv4.address, "at": "2026-03-03 12:00"},
        content_type="application/json",
    )
    assert missing.status_code == 400
    assert list(missing.json()) == ["reason"]
    bad = client.post(
        API, _form("10.0.0.256", at="2026-02-30 10:00"), content_type="application/json"
    )
    assert bad.status_code == 400
    assert sorted(bad.json()) == ["address", "at"]
    assert AbuseLookup.objects.count() == 1


def test_the_api_is_in_the_schema(client_for):
    schema = client_for("admin").get(reverse("api-schema")).content.decode()
    assert "/api/abuse/lookups/" in schema
    assert "LookupOutput" in schema


def test_the_command_answers_and_audits(ann, capsys, make_user):
    make_user("desk", roles=("abuse",))
    call_command(
        "abuse_lookup", ann.public_ipv4.address, "2026-03-03 12:00", reason="CERT 42", user="desk"
    )
    out = capsys.readouterr().out
    assert out.startswith("HELD: ")
    assert "Ann Lee" in out
    assert "laptop" in out
    entry = AuditEntry.objects.get(action="abuse.lookup")
    assert entry.actor_name == "desk"
    assert entry.changes["reason"] == [None, "CERT 42"]


def test_the_command_refuses_bad_input_and_a_missing_reason(ann):
    with pytest.raises(CommandError, match=r"address: “300\.1\.1\.1” is not an IPv4"):
        call_command("abuse_lookup", "300.1.1.1", "2026-03-03 12:00", reason="x")
    with pytest.raises(CommandError, match="reason"):
        call_command("abuse_lookup", "198.51.100.1", "2026-03-03 12:00")
    assert not AbuseLookup.objects.exists()


def test_admins_see_the_link_others_do_not(client_for):
    assert PAGE in client_for("admin").get(reverse("members:dashboard")).content.decode()
    assert PAGE not in client_for("volunteer").get(reverse("members:dashboard")).content.decode()


def test_a_client_that_is_not_logged_in_gets_no_answer_by_htmx(ann):
    response = Client().post(PAGE, _form(ann.public_ipv4.address), HTTP_HX_REQUEST="true")
    assert response.status_code in (204, 302)
    assert not AbuseLookup.objects.exists()


def test_lookups_have_a_limit_of_their_own_shared_by_page_and_api(client_for, ann, settings):
    """N7: past PORTAL_THROTTLE_ABUSE_LOOKUP a user's lookups are refused (429), recording
    nothing, on the page and in the API alike."""
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "abuse_lookup": "3/h"}
    client = client_for("abuse")
    form = _form(ann.public_ipv4.address)
    assert client.post(PAGE, form).status_code == 200
    assert client.post(API, form, content_type="application/json").status_code == 200
    assert client.post(PAGE, form).status_code == 200
    page = client.post(PAGE, form)
    assert page.status_code == 429
    assert "Too many requests" in page.content.decode()
    api = client.post(API, form, content_type="application/json")
    assert api.status_code == 429
    assert "Retry-After" in api
    assert AbuseLookup.objects.count() == 3
    assert client_for("abuse").post(PAGE, form).status_code == 200  # another desk user
