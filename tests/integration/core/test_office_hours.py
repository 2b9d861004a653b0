"""The office-hours search box (results as you type, htmx partial)."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_search_finds_people_by_name_and_email(client_for, make_user):
    make_user("m1", first_name="Fatima", last_name="Okafor", email="fatima@example.org")
    make_user("m2", first_name="Jonas", last_name="Weber", email="jw@example.org")
    client = client_for("volunteer")
    page = client.get(reverse("members:office_hours"), {"q": "okafor"})
    assert b"Fatima" in page.content
    assert b"Jonas" not in page.content
    assert b"Fatima" in client.get(reverse("members:office_hours"), {"q": "fatima@ex"}).content


def test_htmx_request_gets_only_the_results_partial(client_for, make_user):
    make_user("m1", first_name="Fatima", last_name="Okafor")
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
