"""Roles are enforced on the server for every page and API endpoint."""

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

PAGES = {
    # url name: roles that may open it
    "members:dashboard": {"member", "volunteer", "support", "admin"},
    "members:office_hours": {"volunteer", "support", "admin"},
    "health:system": {"admin"},
}
APIS = {
    "api-me": {"member", "volunteer", "support", "admin"},
    "api-system-status": {"admin"},
    "api-schema": {"member", "volunteer", "support", "admin"},
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_anonymous_visitors_are_sent_to_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ["member", "volunteer", "support", "admin"])
@pytest.mark.parametrize("name", sorted(PAGES))
def test_pages_admit_exactly_their_roles(client_for, role, name):
    response = client_for(role).get(reverse(name))
    assert response.status_code == (200 if role in PAGES[name] else 403)


@pytest.mark.parametrize("role", ["member", "volunteer", "support", "admin"])
@pytest.mark.parametrize("name", sorted(APIS))
def test_api_admits_exactly_its_roles(make_user, role, name):
    api = APIClient()
    api.force_authenticate(make_user(roles=(role,)))
    response = api.get(reverse(name))
    assert response.status_code == (200 if role in APIS[name] else 403)


@pytest.mark.parametrize("name", sorted(APIS))
def test_api_refuses_anonymous_callers(name):
    assert APIClient().get(reverse(name)).status_code in {401, 403}


@pytest.mark.parametrize(
    ("role", "target"),
    [
        ("member", "members:dashboard"),
        ("volunteer", "members:office_hours"),
        ("support", "members:office_hours"),
        ("admin", "members:office_hours"),
    ],
)
def test_home_sends_each_role_to_its_page(client_for, role, target):
    response = client_for(role).get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"] == reverse(target)


def test_token_from_drf_create_token_authenticates(make_user, capsys):
    user = make_user("apiuser", roles=("volunteer",))
    call_command("drf_create_token", "apiuser")
    token = Token.objects.get(user=user).key
    assert token in capsys.readouterr().out
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    body = api.get(reverse("api-me")).json()
    assert body["username"] == "apiuser"
    assert body["roles"] == ["volunteer"]
    api.credentials(HTTP_AUTHORIZATION="Token not-a-valid-token")
    assert api.get(reverse("api-me")).status_code == 401


def test_schema_and_docs_describe_the_api(client_for):
    client = client_for("member")
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/me/" in schema.json()["paths"]
    docs = client.get(reverse("api-docs"))
    assert docs.status_code == 200
    # Swagger UI comes from our own static files, never from a CDN.
    assert b"cdn." not in docs.content
    assert b"/static/drf_spectacular_sidecar/" in docs.content
