"""404, 403 and 500 pages in the reader's language, with a way back."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_missing_page_says_so_in_german_and_english(client):
    english = client.get("/no-such-page/", HTTP_ACCEPT_LANGUAGE="en")
    assert english.status_code == 404
    assert "Page not found" in english.content.decode()
    german = client.get("/no-such-page/", HTTP_ACCEPT_LANGUAGE="de")
    assert german.status_code == 404
    assert "Seite nicht gefunden" in german.content.decode()
    assert 'href="/"' in german.content.decode()


def test_a_forbidden_page_says_so(client, make_user):
    client.force_login(make_user("mia"))  # a member, not staff
    response = client.get("/office-hours/", HTTP_ACCEPT_LANGUAGE="de")
    assert response.status_code == 403
    assert "Nicht erlaubt" in response.content.decode()


def test_a_server_error_page_in_german_without_a_traceback(settings):
    from django.urls import path

    import portal.urls

    def boom(request):
        raise RuntimeError("secret detail")

    portal.urls.urlpatterns.append(path("boom-for-test/", boom))
    try:
        client = Client(raise_request_exception=False)
        response = client.get("/boom-for-test/", HTTP_ACCEPT_LANGUAGE="de")
        assert response.status_code == 500
        text = response.content.decode()
        assert "Etwas ist schiefgegangen" in text
        assert "secret detail" not in text
        # The portal's layout (its style, name and footer) without a database or a user.
        assert 'lang="de"' in text
        assert "pico-2.1.1" in text
        assert "portal.css" in text
        assert 'class="brand"><strong>Netzportal</strong>' in text
        assert "Netzportal des Wohnheimnetzes" in text
    finally:
        portal.urls.urlpatterns.pop()


def test_an_expired_form_says_what_to_do_in_the_portal_layout(make_user):
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/accounts/login/", {"username": "x", "password": "y"}, HTTP_ACCEPT_LANGUAGE="de"
    )
    assert response.status_code == 403
    text = response.content.decode()
    assert "Das Formular ist abgelaufen" in text
    assert "Nichts wurde geändert" in text
    assert "Netzportal des Wohnheimnetzes" in text  # the portal's footer
    english = client.post("/accounts/login/", {"username": "x"}, HTTP_ACCEPT_LANGUAGE="en")
    assert "The form has expired" in english.content.decode()
