"""A member's notices and preferences on their page and in the API: only their own (404 for
anyone else's, staff included), paginated, with an empty state; preferences audited."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEntry
from apps.notifications.choices import NoticeKind
from apps.notifications.models import Preference
from apps.notifications.services import notice_create
from tests.factories import MemberFactory

pytestmark = pytest.mark.django_db


def outage(member, title):
    return notice_create(
        member=member,
        kind=NoticeKind.INCIDENT,
        params={"title": title, "buildings": ["A"], "started_at": timezone.now().isoformat()},
    )


def api_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_member_cannot_read_another_members_notices(client, make_user):
    alice, bob = MemberFactory(), MemberFactory()
    mine = outage(alice, "Alice's outage")
    theirs = outage(bob, "Bob's outage")
    client.force_login(alice.user)

    page = client.get(reverse("notifications:notice_list")).content.decode()
    assert "Alice&#x27;s outage" in page
    assert "Bob" not in page
    assert client.get(reverse("notifications:notice_detail", args=[mine.pk])).status_code == 200
    assert client.get(reverse("notifications:notice_detail", args=[theirs.pk])).status_code == 404

    api = api_for(alice.user)
    listed = api.get("/api/notices/").json()
    assert [n["id"] for n in listed["results"]] == [mine.pk]
    assert api.get(f"/api/notices/{mine.pk}/").json()["title"].endswith("Alice's outage")
    assert api.get(f"/api/notices/{theirs.pk}/").status_code == 404

    # Staff read nobody's notices either; anonymous callers are refused.
    staff = make_user(roles=("admin",))
    assert api_for(staff).get(f"/api/notices/{theirs.pk}/").status_code == 404
    assert api_for(staff).get("/api/notices/").json()["results"] == []
    assert APIClient().get("/api/notices/").status_code in (401, 403)


def test_the_api_speaks_the_requests_language():
    member = MemberFactory()
    notice = outage(member, "Uplink")
    body = api_for(member.user).get(f"/api/notices/{notice.pk}/", HTTP_ACCEPT_LANGUAGE="de").json()
    assert body["title"] == "Störung in Ihrem Haus: Uplink"


def test_the_page_is_paginated_and_has_an_empty_state(client):
    member = MemberFactory()
    client.force_login(member.user)
    empty = client.get(reverse("notifications:notice_list")).content.decode()
    assert "No notices yet" in empty
    dashboard = client.get(reverse("members:dashboard")).content.decode()
    assert "No notices." in dashboard
    for n in range(25):
        outage(member, f"Outage number {n}")
    first = client.get(reverse("notifications:notice_list")).content.decode()
    assert first.count('data-testid="notice-row"') == 20
    assert "Outage number 24" in first  # newest first
    second = client.get(
        reverse("notifications:notice_list") + "?page=2", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert second.count('data-testid="notice-row"') == 5
    assert "<html" not in second  # the partial only
    dashboard = client.get(reverse("members:dashboard")).content.decode()
    assert dashboard.count('data-testid="notice-row"') == 3


def test_preferences_on_the_page_are_saved_and_audited(client):
    member = MemberFactory()
    client.force_login(member.user)
    form = client.get(reverse("notifications:preferences")).content.decode()
    assert 'name="mail_incident"' in form
    assert 'name="mail_traffic"' in form
    response = client.post(
        reverse("notifications:preferences"),
        {"language": "de", "mail_live": "on", "mail_test_access": "on", "mail_traffic": "on"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert "Saved." in response.content.decode()
    preference = Preference.objects.get(member=member)
    assert preference.language == "de"
    assert not preference.wants_mail(NoticeKind.INCIDENT)
    assert preference.wants_mail(NoticeKind.TRAFFIC)
    entry = AuditEntry.objects.get(action="notice.preferences", member=member)
    assert entry.changes["mail_incident"] == [True, False]
    assert entry.changes["language"] == ["", "de"]
    bad = client.post(reverse("notifications:preferences"), {"language": "fr"})
    assert bad.status_code == 422


def test_preferences_in_the_api():
    member = MemberFactory()
    api = api_for(member.user)
    assert api.get("/api/notices/preferences/").json() == {
        "language": "",
        "mail": {"live": True, "test_access": True, "incident": True, "traffic": False},
    }
    changed = api.put(
        "/api/notices/preferences/",
        {"language": "en", "mail": {"traffic": True, "live": False}},
        format="json",
    )
    assert changed.status_code == 200
    assert changed.json()["mail"] == {
        "live": False,
        "test_access": True,
        "incident": True,
        "traffic": True,
    }
    refused = api.put(
        "/api/notices/preferences/", {"language": "en", "mail": {"spam": True}}, format="json"
    )
    assert refused.status_code == 400
    assert "mail" in refused.json()


def test_a_login_without_membership_has_no_preferences(client, make_user):
    staff = make_user(roles=("volunteer",))
    assert api_for(staff).get("/api/notices/preferences/").status_code == 404
    client.force_login(staff)
    assert client.get(reverse("notifications:preferences")).status_code == 404
    assert "No notices yet" in client.get(reverse("notifications:notice_list")).content.decode()
