"""Rate limits (429 with Retry-After, Redis-backed, limits as settings) and API tokens revoked by
a new password."""

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from apps.tickets.models import Ticket
from tests.factories import member_active
from tests.integration.api.helpers import login

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings):
    settings.PORTAL_THROTTLE_RATES = {
        **settings.PORTAL_THROTTLE_RATES,
        "api": "5/m",
        "ticket_create": "2/h",
        "password_reset_address": "1/h",
        "password_reset_client": "3/h",
    }
    return settings.PORTAL_THROTTLE_RATES


def token_client(user) -> tuple[Client, str]:
    key = Token.objects.create(user=user).key
    return Client(HTTP_AUTHORIZATION=f"Token {key}"), key


def test_api_requests_are_limited_per_token_with_retry_after(rates):
    member = member_active()
    client, _key = token_client(member.user)
    answers = [client.get("/api/me/").status_code for _ in range(6)]
    assert answers == [200] * 5 + [429]
    refused = client.get("/api/me/")
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"]
    other, _ = token_client(member_active().user)
    assert other.get("/api/me/").status_code == 200  # another token has its own budget


def test_tickets_are_limited_per_member_in_the_api_and_on_the_page(rates):
    member = member_active()
    api = login(member.user)
    for n in range(2):
        created = api.post(
            "/api/tickets/", {"subject": f"s{n}", "body": "b"}, content_type="application/json"
        )
        assert created.status_code == 201
    refused = api.post(
        "/api/tickets/", {"subject": "s", "body": "b"}, content_type="application/json"
    )
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    page = api.post(reverse("tickets:my_tickets"), {"subject": "again", "body": "please"})
    assert page.status_code == 429
    assert "Too many requests. Please try again in" in page.content.decode()
    assert int(page["Retry-After"]) > 0
    assert Ticket.objects.filter(requester=member.user).count() == 2
    assert api.get("/api/tickets/").status_code == 200  # reading is not creating
    another = login(member_active().user)
    assert (
        another.post(reverse("tickets:my_tickets"), {"subject": "x", "body": "y"}).status_code
        == 302
    )


def test_password_reset_mails_are_limited_per_address_and_per_client(rates):
    member = member_active()
    url = reverse("password_reset")
    client = Client()
    first = client.post(url, {"email": member.user.email})
    assert first.status_code == 302
    assert len(mail.outbox) == 1
    again = client.post(url, {"email": member.user.email})
    assert again.status_code == 302  # the same page: nothing said about the address
    assert len(mail.outbox) == 1  # but no second mail within the hour
    client.post(url, {"email": "nobody@example.org"})
    refused = client.post(url, {"email": "someone@example.org"})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many requests. Please try again in" in refused.content.decode()
    assert len(mail.outbox) == 1


def test_a_new_password_revokes_the_tokens(rates):
    member = member_active()
    user = member.user
    user.set_password("old-Secret-1")
    user.save()
    client, key = token_client(user)
    assert client.get("/api/me/").status_code == 200
    web = Client()
    web.force_login(user)
    changed = web.post(
        reverse("password_change"),
        {
            "old_password": "old-Secret-1",
            "new_password1": "new-Secret-22x",
            "new_password2": "new-Secret-22x",
        },
    )
    assert changed.status_code == 302
    assert not Token.objects.filter(key=key).exists()
    assert client.get("/api/me/").status_code == 401


def test_a_password_reset_revokes_the_tokens_and_a_hash_upgrade_does_not(rates):
    user = member_active().user
    _client, key = token_client(user)
    fresh = get_user_model().objects.get(pk=user.pk)
    fresh.set_password("reset-Secret-33")
    fresh.save()  # what the reset confirm form does
    assert not Token.objects.filter(key=key).exists()
    _client, key = token_client(fresh)
    fresh.save(update_fields=["email"])  # any other save keeps them
    fresh.check_password("reset-Secret-33")  # may upgrade the hash: not a new password
    assert Token.objects.filter(key=key).exists()
