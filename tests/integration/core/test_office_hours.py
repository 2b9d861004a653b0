"""The office-hours search box (results as you type, htmx partial)."""

import pytest
from django.urls import reverse

from tests.factories import MemberFactory, UserFactory

pytestmark = pytest.mark.django_db


def member(first, last, email=None):
    user = UserFactory(
        first_name=first,
        last_name=last,
        email=email or f"{first.lower()}@example.org",
        roles=["member"],
    )
    return MemberFactory(user=user)


def test_search_finds_members_by_name_and_email(client_for):
    member("Fatima", "Okafor", "fatima@example.org")
    member("Jonas", "Weber", "jw@example.org")
    client = client_for("volunteer")
    page = client.get(reverse("members:office_hours"), {"q": "okafor"})
    results = page.content.decode().split('id="search-results"')[1].split("</section>")[0]
    assert "Fatima" in results
    assert "Jonas" not in results
    assert b"Fatima" in client.get(reverse("members:office_hours"), {"q": "fatima@ex"}).content


def test_htmx_request_gets_only_the_results_partial(client_for):
    member("Fatima", "Okafor")
    response = client_for("volunteer").get(
        reverse("members:office_hours"), {"q": "fatima"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="search-results"')
    assert "<html" not in body
    assert "Fatima" in body


def test_no_match_and_empty_query_say_so(client_for):
    client = client_for("volunteer")
    assert (
        "Nobody matches"
        in client.get(reverse("members:office_hours"), {"q": "zzz"}).content.decode()
    )
    assert "Type a name" in client.get(reverse("members:office_hours")).content.decode()
