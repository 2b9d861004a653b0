"""The second sign-in step: who needs it, enrolment, codes, recovery codes, lockout, the admin."""

import re

import pytest
from django.urls import reverse
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from rest_framework.authtoken.models import Token

from apps.audit.models import AuditEntry
from tests.conftest import totp_code
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

VERIFY = reverse("accounts:two_factor_verify")
SETUP = reverse("accounts:two_factor_setup")
OFFICE_HOURS = reverse("members:office_hours")
DASHBOARD = reverse("members:dashboard")


def password_login(client, user):
    response = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302, "the password step itself passes"
    return response


def landing(client, user):
    """Log in with the password and follow the redirects: the path the browser ends on."""
    response = password_login(client, user)
    return client.get(response["Location"], follow=True).request["PATH_INFO"]


def give_code(client, code, next_url=""):
    return client.post(VERIFY, {"code": code, "next": next_url})


# --- Who needs it -------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["volunteer", "support", "admin"])
def test_staff_without_an_authenticator_are_sent_to_enrolment(client, make_user, staff_2fa, role):
    user = make_user(roles=(role,))
    assert landing(client, user) == SETUP
    # No staff page is reachable before: each sends back to enrolment.
    for path in (OFFICE_HOURS, DASHBOARD, reverse("admin:index"), reverse("api-me")):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith(SETUP)


@pytest.mark.parametrize("role", ["volunteer", "support", "admin"])
def test_staff_with_an_authenticator_are_asked_for_a_code(
    client, make_user, staff_2fa, enrol_second_factor, role
):
    user = make_user(roles=(role,))
    enrol_second_factor(user)
    assert landing(client, user) == VERIFY
    assert (
        client.get(OFFICE_HOURS)["Location"] == f"{VERIFY}?next={OFFICE_HOURS.replace('/', '%2F')}"
    )


def test_members_sign_in_with_the_password_alone_while_staff_must_use_it(
    client, make_user, staff_2fa
):
    member = make_user(roles=("member",))
    assert landing(client, member) == DASHBOARD


def test_with_the_setting_off_staff_sign_in_in_one_step(client, make_user, settings):
    settings.PORTAL_REQUIRE_STAFF_2FA = False
    volunteer = make_user(roles=("volunteer",))
    assert landing(client, volunteer) == OFFICE_HOURS


def test_a_member_who_opted_in_is_asked_for_the_code_even_with_the_setting_off(
    client, make_user, settings, enrol_second_factor
):
    settings.PORTAL_REQUIRE_STAFF_2FA = False
    member = make_user(roles=("member",))
    device, _codes = enrol_second_factor(member)
    assert landing(client, member) == VERIFY
    response = give_code(client, totp_code(device, 1), DASHBOARD)
    assert response["Location"] == DASHBOARD
    assert client.get(DASHBOARD).status_code == 200


# --- The code step ------------------------------------------------------------------------------
def test_the_right_code_opens_the_page_asked_for_and_a_wrong_one_says_so(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    password_login(client, user)
    response = give_code(client, "000000" if totp_code(device, 1) != "000000" else "111111")
    assert response.status_code == 400
    assert "This code is wrong or was used already. 4 more wrong codes" in response.content.decode()
    assert client.get(OFFICE_HOURS).status_code == 302

    response = give_code(client, totp_code(device, 1), OFFICE_HOURS)
    assert response["Location"] == OFFICE_HOURS
    assert client.get(OFFICE_HOURS).status_code == 200


def test_a_code_is_refused_the_second_time(client, make_user, staff_2fa, enrol_second_factor):
    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    code = totp_code(device, 1)
    password_login(client, user)
    assert give_code(client, code).status_code == 302
    client.post(reverse("logout"))
    password_login(client, user)
    assert give_code(client, code).status_code == 400, "a replayed code is refused"


def test_an_outside_next_is_not_followed(client, make_user, staff_2fa, enrol_second_factor):
    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    password_login(client, user)
    response = give_code(client, totp_code(device, 1), "https://evil.example/")
    assert response["Location"] == reverse("home")


def test_a_polling_fragment_of_a_half_signed_in_session_sends_the_page_to_the_code(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("volunteer",))
    enrol_second_factor(user)
    password_login(client, user)
    response = client.get(
        reverse("firewall:host_list"),
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/firewalls/",
    )
    assert response.status_code == 204
    assert response["HX-Redirect"] == f"{VERIFY}?next=%2Ffirewalls%2F"


def test_the_code_page_shows_no_navigation_before_the_code(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("admin",))
    enrol_second_factor(user)
    password_login(client, user)
    page = client.get(VERIFY).content.decode()
    assert 'name="code"' in page
    assert reverse("admin:index") not in page
    assert reverse("members:office_hours") not in page


def test_the_code_page_speaks_german(client, make_user, staff_2fa, enrol_second_factor):
    user = make_user(roles=("volunteer",))
    enrol_second_factor(user)
    password_login(client, user)
    page = client.get(VERIFY, HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "Zweiter Schritt" in page
    assert "Wiederherstellungscodes" in page


# --- Recovery codes -----------------------------------------------------------------------------
def test_a_recovery_code_signs_in_once(client, make_user, staff_2fa, enrol_second_factor):
    user = make_user(roles=("support",))
    _device, codes = enrol_second_factor(user)
    assert len(codes) == 10
    assert len(set(codes)) == 10
    password_login(client, user)
    # As people type it: upper case, with a space in the middle.
    typed = f"{codes[0][:4].upper()} {codes[0][4:].upper()}"
    assert give_code(client, typed)["Location"] == reverse("home")
    client.post(reverse("logout"))

    password_login(client, user)
    response = give_code(client, codes[0])
    assert response.status_code == 400
    assert not StaticToken.objects.filter(token=codes[0]).exists()
    assert give_code(client, codes[1]).status_code == 302
    assert StaticToken.objects.filter(device__user=user).count() == 8


# --- Lockout ------------------------------------------------------------------------------------
def test_five_wrong_codes_lock_the_second_step_also_for_the_right_code(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("volunteer",))
    device, codes = enrol_second_factor(user)
    password_login(client, user)
    for _ in range(4):
        assert give_code(client, "999999x").status_code == 400
    response = give_code(client, "999999x")
    assert response.status_code == 429
    assert "Too many wrong codes" in response.content.decode()
    # Logged out: the password step starts again, and then even the right codes are refused.
    assert client.get(OFFICE_HOURS)["Location"].startswith(reverse("login"))
    password_login(client, user)
    assert client.get(VERIFY).status_code == 429, "the code page says so at once"
    password_login(client, user)
    assert give_code(client, totp_code(device, 1)).status_code == 429
    password_login(client, user)
    assert give_code(client, codes[0]).status_code == 429
    assert client.get(OFFICE_HOURS)["Location"].startswith(reverse("login"))
    assert StaticToken.objects.filter(token=codes[0]).exists(), "a locked try uses up nothing"

    actions = list(AuditEntry.objects.filter(actor=user).values_list("action", flat=True))
    assert actions.count("account.second_factor_failed") == 4
    assert actions.count("account.second_factor_locked") == 1


def test_the_lock_ends_after_its_time(client, make_user, staff_2fa, enrol_second_factor):
    from datetime import timedelta

    from django.utils import timezone

    from apps.accounts.models import SecondFactorAttempts

    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    password_login(client, user)
    for _ in range(5):
        give_code(client, "999999x")
    SecondFactorAttempts.objects.filter(user=user).update(
        locked_until=timezone.now() - timedelta(seconds=1)
    )
    password_login(client, user)
    assert give_code(client, totp_code(device, 1)).status_code == 302


def test_the_lock_of_one_account_leaves_others_alone(
    client, make_user, staff_2fa, enrol_second_factor
):
    vera, otto = make_user(roles=("volunteer",)), make_user(roles=("volunteer",))
    enrol_second_factor(vera)
    otto_device, _codes = enrol_second_factor(otto)
    password_login(client, vera)
    for _ in range(5):
        give_code(client, "999999x")
    password_login(client, otto)
    assert give_code(client, totp_code(otto_device, 1)).status_code == 302


# --- Enrolment ----------------------------------------------------------------------------------
def test_enrolment_shows_the_qr_code_and_key_confirms_and_shows_ten_codes_once(
    client, make_user, staff_2fa
):
    user = make_user(roles=("volunteer",))
    password_login(client, user)
    page = client.get(f"{SETUP}?next=/staff/office-hours/").content.decode()
    assert "<svg" in page
    assert "QR code for your authenticator app" in page
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    secret = re.search(r'data-testid="totp-secret">([A-Z2-7 ]+)<', page).group(1)
    from base64 import b32decode

    assert b32decode(secret.replace(" ", "")) == device.bin_key
    # The same secret on reload: the app scanned a moment ago still matches.
    assert secret in client.get(SETUP).content.decode()

    wrong = client.post(SETUP, {"code": "12345x"})
    assert wrong.status_code == 400
    assert "This code does not match" in wrong.content.decode()
    assert not TOTPDevice.objects.filter(user=user, confirmed=True).exists()

    response = client.post(SETUP, {"code": totp_code(device), "next": OFFICE_HOURS})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    shown = re.findall(r"<li><code>([a-z2-7]{8})</code></li>", page)
    assert len(shown) == 10
    assert set(shown) == set(
        StaticToken.objects.filter(device__user=user).values_list("token", flat=True)
    )
    assert OFFICE_HOURS in page
    # Shown once: a second visit goes to the settings page, which shows no code.
    again = client.get(reverse("accounts:two_factor_codes"))
    assert again["Location"] == reverse("accounts:two_factor")
    assert shown[0] not in client.get(reverse("accounts:two_factor")).content.decode()
    # Enrolled and verified: staff pages open.
    assert client.get(OFFICE_HOURS).status_code == 200
    assert AuditEntry.objects.filter(actor=user, action="account.second_factor_enable").exists()


def test_a_half_signed_in_session_cannot_replace_the_authenticator(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    password_login(client, user)
    assert client.get(SETUP)["Location"] == VERIFY
    client.post(SETUP, {"code": "123456"})
    assert list(TOTPDevice.objects.filter(user=user)) == [device]


# --- Members opt in; turning off and new codes need a code ------------------------------------
def test_a_member_opts_in_from_the_account_page(client, make_user):
    member = make_user(roles=("member",))
    client.force_login(member)
    assert reverse("accounts:two_factor") in client.get(DASHBOARD).content.decode()
    assert "Set up the second step" in client.get(reverse("accounts:two_factor")).content.decode()
    client.get(SETUP)
    device = TOTPDevice.objects.get(user=member)
    assert client.post(SETUP, {"code": totp_code(device)}).status_code == 302
    client.post(reverse("logout"))
    assert landing(client, member) == VERIFY


def test_new_recovery_codes_need_a_code_and_end_the_old_ones(
    client, make_user, enrol_second_factor
):
    member = make_user(roles=("member",))
    device, old = enrol_second_factor(member)
    password_login(client, member)
    give_code(client, totp_code(device, 1))
    regenerate = reverse("accounts:two_factor_regenerate")

    response = client.post(regenerate, {"regenerate-code": "000000x"})
    assert response.status_code == 400
    assert set(old) == set(StaticToken.objects.values_list("token", flat=True))

    response = client.post(regenerate, {"regenerate-code": old[0]})
    new = re.findall(
        r"<li><code>([a-z2-7]{8})</code></li>", client.get(response["Location"]).content.decode()
    )
    assert len(new) == 10
    assert not set(new) & set(old)
    assert set(new) == set(StaticToken.objects.values_list("token", flat=True))


def test_turning_off_needs_a_code_then_the_password_alone_signs_in(
    client, make_user, enrol_second_factor
):
    member = make_user(roles=("member",))
    device, codes = enrol_second_factor(member)
    password_login(client, member)
    give_code(client, totp_code(device, 1))
    off = reverse("accounts:two_factor_disable")

    assert client.post(off, {"disable-code": "999999x"}).status_code == 400
    assert TOTPDevice.objects.filter(user=member).exists()
    assert client.post(off, {"disable-code": totp_code(device, 2)}).status_code == 302
    assert not TOTPDevice.objects.filter(user=member).exists()
    assert not StaticToken.objects.filter(token__in=codes).exists()
    client.post(reverse("logout"))
    assert landing(client, member) == DASHBOARD
    assert AuditEntry.objects.filter(actor=member, action="account.second_factor_disable").exists()


def test_staff_who_remove_their_authenticator_set_up_a_new_one_right_away(
    client, make_user, staff_2fa, enrol_second_factor
):
    user = make_user(roles=("volunteer",))
    device, _codes = enrol_second_factor(user)
    password_login(client, user)
    give_code(client, totp_code(device, 1))
    response = client.post(
        reverse("accounts:two_factor_disable"), {"disable-code": totp_code(device, 2)}
    )
    assert response["Location"] == SETUP
    assert client.get(OFFICE_HOURS)["Location"].startswith(SETUP)


# --- The admin and the API ----------------------------------------------------------------------
def test_the_admin_needs_the_second_factor(client, make_user, staff_2fa, enrol_second_factor):
    admin = make_user(roles=("admin",))
    device, _codes = enrol_second_factor(admin)
    # Through the admin's own login form too.
    response = client.post(
        reverse("admin:login"), {"username": admin.username, "password": PASSWORD}
    )
    assert client.get(reverse("admin:index"))["Location"].startswith(VERIFY)
    give_code(client, totp_code(device, 1))
    assert client.get(reverse("admin:index")).status_code == 200
    assert response.status_code == 302


def test_the_admin_site_refuses_an_unverified_session_by_itself(rf, make_user, staff_2fa):
    from django.contrib import admin
    from django.contrib.sessions.backends.db import SessionStore

    user = make_user(roles=("admin",))
    request = rf.get("/admin/")
    request.user = user
    request.session = SessionStore()
    assert admin.site.has_permission(request) is False


def test_api_tokens_need_no_second_factor(client, make_user, staff_2fa, enrol_second_factor):
    user = make_user(roles=("volunteer",))
    enrol_second_factor(user)
    token = Token.objects.create(user=user)
    response = client.get(reverse("api-me"), HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    assert response.json()["username"] == user.username
