"""A lost session during htmx polling leads once to the login page, not into every badge."""

import pytest

pytestmark = pytest.mark.django_db


def test_an_htmx_request_without_a_session_gets_one_full_page_redirect_to_login(client):
    response = client.get(
        "/system/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://127.0.0.1:8000/me/?tab=devices",
    )
    assert response.status_code == 204
    assert response.content == b""  # nothing to swap into the badge
    assert response["HX-Redirect"] == "/accounts/login/?next=%2Fme%2F%3Ftab%3Ddevices"


def test_an_ordinary_request_keeps_the_ordinary_redirect(client):
    response = client.get("/system/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert "HX-Redirect" not in response


def test_other_htmx_redirects_are_left_alone(client, make_user):
    client.force_login(make_user("vera"))
    response = client.get("/", HTTP_HX_REQUEST="true")  # home sends members to their page
    assert response.status_code == 302
    assert "HX-Redirect" not in response
