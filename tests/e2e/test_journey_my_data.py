"""A member downloads their data from their page in the browser and gets their own JSON."""

from __future__ import annotations

import json
import os

import pytest

from tests.factories import PASSWORD, device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("width", [390, 1280])
def test_member_downloads_their_data(django_db_setup, browser, live_server, width):
    member = member_active()
    member.user.username = "rita"
    member.user.set_password(PASSWORD)
    member.user.save()
    device_add(member, "rita-laptop")
    context = browser.new_context(
        base_url=live_server.url,
        locale="en-GB",
        viewport={"width": width, "height": 900},
        accept_downloads=True,
    )
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/me/")
    if os.environ.get("PORTAL_SCREENSHOTS"):
        page.screenshot(path=f"{os.environ['PORTAL_SCREENSHOTS']}/my-data-{width}.png")
    with page.expect_download() as info:
        page.get_by_role("link", name="Download my data").click()
    download = info.value
    assert download.suggested_filename.startswith("my-portal-data-")
    with open(download.path(), encoding="utf-8") as f:
        data = json.load(f)
    assert data["account"]["username"] == "rita"
    assert [d["name"] for d in data["devices"]] == ["rita-laptop"]
    context.close()
