"""Login, failed-login throttling, password reset by mail, language switch."""

import re

import pytest
from django.core import mail
from django.urls import reverse

from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def login(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def test_login_with_the_right_password_lands_on_the_role_page(client, make_user):
    make_user("vera", roles=("volunteer",))
    response = login(client, "vera", PASSWORD)
    assert response.status_code == 302
    assert client.get(response["Location"], follow=True).request["PATH_INFO"] == reverse(
        "members:office_hours"
    )


def test_wrong_password_shows_an_error_and_does_not_log_in(client, make_user):
    make_user("vera")
    response = login(client, "vera", "wrong")
    assert response.status_code == 200
    assert b'id="login-errors"' in response.content
    assert client.get(reverse("members:dashboard")).status_code == 302


def test_five_failed_logins_lock_the_account_even_with_the_right_password(client, make_user):
    make_user("vera")
    for _ in range(5):
        login(client, "vera", "wrong")
    response = login(client, "vera", PASSWORD)
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content
    assert client.get(reverse("members:dashboard")).status_code == 302


def test_lockout_of_one_account_leaves_others_alone(client, make_user):
    make_user("vera")
    make_user("otto")
    for _ in range(5):
        login(client, "vera", "wrong")
    assert login(client, "otto", PASSWORD).status_code == 302


def test_logout_needs_post_and_ends_the_session(client, make_user):
    make_user("vera")
    login(client, "vera", PASSWORD)
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("members:dashboard")).status_code == 302


def test_password_reset_by_mail(client, make_user):
    make_user("vera", email="vera@example.org")
    response = client.post(reverse("password_reset"), {"email": "vera@example.org"})
    assert response.status_code == 302
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["vera@example.org"]
    link = re.search(r"https?://[^/]+(/accounts/reset/\S+/)", message.body).group(1)
    form_page = client.get(link, follow=True)
    assert b'name="new_password1"' in form_page.content
    done = client.post(
        form_page.request["PATH_INFO"],
        {"new_password1": "a new long passphrase", "new_password2": "a new long passphrase"},
    )
    assert done.status_code == 302
    assert login(client, "vera", "a new long passphrase").status_code == 302


def test_password_reset_for_an_unknown_address_sends_nothing_and_reveals_nothing(client):
    response = client.post(reverse("password_reset"), {"email": "nobody@example.org"})
    assert response.status_code == 302  # same answer as for a known address
    assert mail.outbox == []


def test_switching_to_german_translates_the_pages(client_for):
    client = client_for("volunteer")
    english = client.get(reverse("members:office_hours"))
    assert b"Office hours" in english.content
    client.post(reverse("set_language"), {"language": "de", "next": "/"})
    german = client.get(reverse("members:office_hours"))
    assert german.content.count(b"Sprechstunde") >= 2
    assert b'<html lang="de">' in german.content


def login_from(client, username, password, *, peer="127.0.0.1", forwarded=None):
    extra = {"REMOTE_ADDR": peer}
    if forwarded:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def test_behind_the_proxy_one_attacker_does_not_lock_out_everybody(client, make_user):
    """nginx on loopback passes every client; the lockout counts the real client address."""
    make_user("admin2")
    for _ in range(5):
        login_from(client, "admin2", "wrong", forwarded="198.51.100.66")
    assert login_from(client, "admin2", PASSWORD, forwarded="198.51.100.66").status_code == 429
    client.logout()
    other = login_from(client, "admin2", PASSWORD, forwarded="198.51.100.7")
    assert other.status_code == 302  # the real admin, from elsewhere, gets in


def test_a_forged_forwarded_header_from_an_untrusted_peer_is_ignored(client, make_user):
    make_user("vera")
    for n in range(5):  # a direct client rotating a forged header: still one client
        login_from(client, "vera", "wrong", peer="192.0.2.5", forwarded=f"198.51.100.{n}")
    locked = login_from(client, "vera", PASSWORD, peer="192.0.2.5", forwarded="198.51.100.99")
    assert locked.status_code == 429


def test_wrong_passwords_from_one_ipv6_64_lock_out_whichever_address_they_come_from(
    client, make_user
):
    """N5: an IPv6 client picks any of 2^64 addresses of its /64; the lockout counts the /64."""
    make_user("vera")
    for n in range(1, 9):
        login_from(client, "vera", "wrong", forwarded=f"2001:db8:100:7::{n:x}")
    locked = login_from(client, "vera", PASSWORD, forwarded="2001:db8:100:7:abcd::99")
    assert locked.status_code == 429
    elsewhere = login_from(client, "vera", PASSWORD, forwarded="2001:db8:100:8::1")
    assert elsewhere.status_code == 302  # another /64 (another household) is not locked out


def test_an_account_has_a_cap_on_failed_logins_from_all_clients_together(
    client, make_user, settings
):
    """N5: a spread-out guess (a few tries from each of many clients) meets the per-account cap:
    the account then refuses every sign-in for the rest of the window, right password or not."""
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "login_account": "12/h"}
    make_user("vera")
    make_user("otto")
    for n in range(12):
        response = login_from(client, "vera", "wrong", forwarded=f"198.51.100.{n // 3 + 1}")
        assert response.status_code == 200  # 3 per client: no client reaches its own lockout
    locked = login_from(client, "vera", PASSWORD, forwarded="203.0.113.50")
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content
    assert b"up to an hour" in locked.content
    assert login_from(client, "otto", PASSWORD, forwarded="203.0.113.50").status_code == 302


def test_password_reset_mails_are_limited_per_ipv6_64(client, make_user, settings):
    settings.PORTAL_THROTTLE_RATES = {
        **settings.PORTAL_THROTTLE_RATES,
        "password_reset_client": "3/h",
        "password_reset_address": "100/h",
    }
    for n in range(4):
        make_user(f"user{n}", email=f"user{n}@example.org")
    answers = [
        client.post(
            reverse("password_reset"),
            {"email": f"user{n}@example.org"},
            REMOTE_ADDR="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"2001:db8:100:7::{n + 1:x}",
        ).status_code
        for n in range(4)
    ]
    assert answers[:3] == [302, 302, 302]
    assert answers[3] == 429
    assert len(mail.outbox) == 3
