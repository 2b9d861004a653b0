"""Online sign-up: a pending member with their own password, validation, spam protection."""

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.members.selectors import pending_queue
from apps.members.signup import signup_throttle_reset
from tests.factories import BuildingFactory, RoomFactory, UserFactory

pytestmark = pytest.mark.django_db
URL = "/signup/"
_addresses = itertools.count(1)


@pytest.fixture
def ip():
    """A client address of its own per test: the throttle lives in the shared Redis."""
    address = f"203.0.113.{next(_addresses) % 250 + 1}"
    signup_throttle_reset(ip=address)
    yield address
    signup_throttle_reset(ip=address)


@pytest.fixture
def room():
    return RoomFactory(number="101")


def data(the_room, **overrides):
    values = {
        "first_name": "Amara",
        "last_name": "Nwosu",
        "email": "Amara.Nwosu@Uni.example",
        "phone": "",
        "room": the_room.label.lower(),
        "password1": "dorm-router-42",
        "password2": "dorm-router-42",
        "website": "",
    }
    values.update(overrides)
    return values


def test_sign_up_makes_a_pending_member_logged_in_and_in_the_queue(client, room, ip):
    response = client.post(URL, data(room), REMOTE_ADDR=ip)
    assert response.status_code == 302
    assert response["Location"] == reverse("members:dashboard")
    member = Member.objects.select_related("user").get(user__email="amara.nwosu@uni.example")
    assert member.status == MemberStatus.PENDING
    assert member.room == room
    assert member.user.check_password("dorm-router-42")
    assert member.user.groups.filter(name="member").exists()
    assert AuditEntry.objects.filter(action="member.sign_up", member=member).exists()
    # Logged in: the dashboard says what to do next.
    page = client.get(reverse("members:dashboard")).content.decode()
    assert "Come to the office hours" in page
    # The volunteers see them waiting.
    volunteer = UserFactory(roles=["volunteer"])
    assert list(pending_queue(actor=volunteer)) == [member]
    # And the password works for the login page.
    client.logout()
    login = {"username": "amara.nwosu@uni.example", "password": "dorm-router-42"}
    assert client.post(reverse("login"), login).status_code == 302


def test_page_needs_no_login_and_links_from_login(client):
    assert client.get(URL).status_code == 200
    assert URL in client.get(reverse("login")).content.decode()


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"room": "Z-999"}, "room", "There is no room"),
        ({"email": "not-an-address"}, "email", "valid email"),
        ({"password2": "something-else-1"}, "password2", "differ"),
        ({"password1": "short", "password2": "short"}, "password1", "too short"),
        ({"password1": "12345678901", "password2": "12345678901"}, "password1", "entirely numeric"),
        ({"password1": "nwosu123", "password2": "nwosu123"}, "password1", "too similar"),
        ({"first_name": ""}, "first_name", "required"),
    ],
)
def test_invalid_input_is_refused_with_a_message(client, room, ip, overrides, field, text):
    response = client.post(URL, data(room, **overrides), REMOTE_ADDR=ip)
    assert response.status_code == 422
    assert text in " ".join(response.context["form"].errors[field])
    assert not Member.objects.exists()


def test_an_existing_e_mail_address_is_refused(client, room, ip):
    UserFactory(username="someone", email="amara.nwosu@uni.example")
    response = client.post(URL, data(room), REMOTE_ADDR=ip)
    assert response.status_code == 422
    assert "already an account" in response.content.decode()
    assert not Member.objects.exists()


def test_a_room_of_a_building_without_network_is_refused(client, ip):
    room = RoomFactory(building=BuildingFactory(subnets=False))
    response = client.post(URL, data(room), REMOTE_ADDR=ip)
    assert response.status_code == 422
    assert "not connected to the network" in response.content.decode()
    assert not Member.objects.exists()


def test_the_honeypot_refuses_bots(client, room, ip):
    response = client.post(URL, data(room, website="http://spam.example"), REMOTE_ADDR=ip)
    assert response.status_code == 400
    assert not get_user_model().objects.filter(email="amara.nwosu@uni.example").exists()


def test_attempts_per_address_are_limited(client, room, ip, settings):
    settings.SIGNUP_ATTEMPTS_PER_WINDOW = 3
    for _n in range(3):
        assert client.post(URL, data(room, room="Z-999"), REMOTE_ADDR=ip).status_code == 422
    response = client.post(URL, data(room), REMOTE_ADDR=ip)
    assert response.status_code == 429
    assert "Too many sign-ups" in response.content.decode()
    assert not Member.objects.exists()
    # Another address is not affected.
    other = "198.51.100.77"
    signup_throttle_reset(ip=other)
    assert client.post(URL, data(room), REMOTE_ADDR=other).status_code == 302
    signup_throttle_reset(ip=other)


def test_accounts_per_address_are_limited(client, room, ip, settings):
    settings.SIGNUP_ACCOUNTS_PER_WINDOW = 2
    for n in range(2):
        client.logout()
        response = client.post(URL, data(room, email=f"p{n}@uni.example"), REMOTE_ADDR=ip)
        assert response.status_code == 302
    client.logout()
    response = client.post(URL, data(room, email="p3@uni.example"), REMOTE_ADDR=ip)
    assert response.status_code == 429
    assert Member.objects.count() == 2


def test_logged_in_users_are_sent_to_their_account(client_for):
    response = client_for("member").get(URL)
    assert response.status_code == 302
    assert response.url == reverse("members:dashboard")


def test_attempts_from_one_ipv6_64_count_together(client, room, settings):
    """N5: a client rotating addresses inside its /64 is one client for the limit."""
    settings.SIGNUP_ATTEMPTS_PER_WINDOW = 3
    signup_throttle_reset(ip="2001:db8:100:9::")
    try:
        for n in range(3):
            response = client.post(
                URL, data(room, room="Z-999"), REMOTE_ADDR=f"2001:db8:100:9::{n + 1}"
            )
            assert response.status_code == 422
        response = client.post(URL, data(room), REMOTE_ADDR="2001:db8:100:9:ffff::1")
        assert response.status_code == 429
        assert not Member.objects.exists()
    finally:
        signup_throttle_reset(ip="2001:db8:100:9::")
