"""German pages say what a German reader expects: "Verknüpfung aufheben" (not "Lösen"),
"kompiliert" (not "übersetzt"), no "seit vor 6 Minuten", built-in profile names and version causes
in German."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from apps.audit.sentences import cause_sentences
from apps.firewall.models import FirewallHost
from apps.firewall.versions import ruleset_version_store
from apps.network.models import ShapingProfile
from apps.tickets.services import incident_declare, incident_tickets_link, ticket_open
from tests.factories import UserFactory, member_on_test

pytestmark = pytest.mark.django_db


def german(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="de")
    client.force_login(user)
    client.cookies["django_language"] = "de"
    return client


def test_unlinking_a_ticket_is_not_losen():
    sam = UserFactory(username="sam", roles=["support"])
    alice = UserFactory(username="alice", roles=["member"])
    ticket = ticket_open(actor=alice, subject="Offline", body="nothing works")
    incident = incident_declare(actor=sam, title="Switch down")
    incident_tickets_link(incident=incident, tickets=[ticket], actor=sam)
    page = german(sam).get(reverse("tickets:incident_detail", args=[incident.pk])).text
    assert "Verknüpfung aufheben</button>" in page
    assert ">Lösen<" not in page


def test_the_host_page_says_kompiliert_and_no_seit_vor():
    admin = UserFactory(username="ada", roles=["admin"])
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    version = ruleset_version_store(
        host=host, nft_text="table inet portal_fw {}\n", tc_text="", content_hash="a" * 64,
        counts={}, compile_seconds=0.1, cause="blockedport.save 3 (by ada)",
    )  # fmt: skip
    host.mark_applied(version)
    FirewallHost.objects.filter(pk=host.pk).update(applied_at=timezone.now() - timedelta(minutes=6))
    page = german(admin).get(reverse("firewall:host_detail", args=[host.name])).text
    assert "seit vor" not in page
    assert "geladen vor 6" in page
    assert "Kompiliert" in page
    assert "übersetzt" not in page.lower()
    assert "ada hat den gesperrten Portbereich #3 geändert" in page  # article and case
    assert "blockedport" not in page


def test_built_in_profile_names_and_their_sentences_in_german():
    member = member_on_test(days=5)
    slow = ShapingProfile.objects.create(name="Test access (slow)", down_kbit=2000, up_kbit=500)
    volunteer = UserFactory(username="vic", roles=["volunteer"])
    member.test_access.profile = slow
    member.test_access.save()
    page = german(volunteer).get(reverse("members:member_detail", args=[member.pk])).text
    assert "Testzugang (langsam)" in page
    assert "Test access" not in page
    with translation.override("de"):
        assert str(ShapingProfile.default()) == "Testzugang (↓ 4 Mbit/s / ↑ 1 Mbit/s)"
        causes = [str(s) for s in cause_sentences("member.test_access_extend 0 (by vic)")]
    assert causes == ["vic hat den Testzugang von #0 geändert"]
