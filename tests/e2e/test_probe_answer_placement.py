"""Issue 25: a forward's "Test" answer goes under its buttons, within the page: it used to be
appended right of them, the desktop page grew to 1,558 px and the answer was cut off."""

import pytest
from playwright.sync_api import expect

from apps.network.models import NetworkSettings
from tests.factories import PASSWORD, device_add, forward_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)

OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"


@pytest.mark.parametrize("width", [1280, 390])
def test_the_test_answer_stays_inside_the_page(browser, live_server, width):
    # A probe host that refuses at once: the answer is the long "does not answer: ..." text.
    NetworkSettings.objects.update_or_create(
        id=1, defaults={"probe_address": "127.0.0.9", "forward_tests_per_hour": 10}
    )
    member = member_active()
    member.user.set_password(PASSWORD)
    member.user.save()
    forward_add(member, device_add(member, "server"), ports="8080")
    context = browser.new_context(
        base_url=live_server.url, locale="en-GB", viewport={"width": width, "height": 900}
    )
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(member.user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto("/me/")
    page.get_by_role("button", name="Test forward TCP 8080 from outside").click()
    answer = page.locator(".probe-result")
    expect(answer).to_contain_text("does not answer")
    assert page.evaluate(OVERFLOW) <= 0
    box = answer.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= width  # all of it on the screen
    context.close()
