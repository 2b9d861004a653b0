"""A resident signs up online with their room; a volunteer finds them in the queue and checks
them in."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.members.models import Member
from apps.members.signup import signup_throttle_reset
from tests.factories import PASSWORD, RoomFactory, UserFactory, pool_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh_throttle():
    signup_throttle_reset(ip="127.0.0.1")
    yield
    signup_throttle_reset(ip="127.0.0.1")


def test_resident_signs_up_and_is_checked_in(django_db_setup, page, login, fresh_throttle):
    pool_create()
    room = RoomFactory(number="204")
    UserFactory(username="vic", roles=["volunteer"])

    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign up with your room").click()
    expect(page.get_by_role("heading", name="Sign up for the dormitory network")).to_be_visible()
    page.get_by_label("First name").fill("Amara")
    page.get_by_label("Last name").fill("Nwosu")
    page.get_by_label("E-mail").fill("amara@uni.example")
    page.get_by_label("Your room").fill("Z-1")
    page.get_by_label("Password", exact=True).fill("dorm-router-42")
    page.get_by_label("Password again").fill("dorm-router-42")
    page.get_by_role("button", name="Sign up").click()
    # A typo in the room: said clearly, nothing else lost but the passwords.
    expect(page.locator("#id_room-error")).to_contain_text("There is no room")
    expect(page.get_by_label("E-mail")).to_have_value("amara@uni.example")
    page.get_by_label("Your room").fill(room.label)
    page.get_by_label("Password", exact=True).fill("dorm-router-42")
    page.get_by_label("Password again").fill("dorm-router-42")
    page.get_by_role("button", name="Sign up").click()

    expect(page).to_have_url(re.compile(r"/me/$"))
    expect(page.locator(".messages")).to_contain_text(f"signed up for room {room.label}")
    expect(page.get_by_text("Pending check-in").first).to_be_visible()
    member = Member.objects.get(user__email="amara@uni.example")
    assert member.status == "pending"

    page.get_by_test_id("logout").click()
    login("vic", PASSWORD)
    queue = page.locator("#pending-queue")
    expect(queue).to_contain_text("Amara Nwosu")
    queue.get_by_label("ID checked: Amara Nwosu").check()
    queue.get_by_role("button", name="Check in Amara Nwosu").click()
    expect(page.locator(".messages")).to_contain_text("Amara Nwosu is checked in and active.")
    member.refresh_from_db()
    assert member.status == "active"
