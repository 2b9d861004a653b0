"""A version pushed as an increment (issue 26's delta path), as an admin meets it in Chromium at
390 and 1280 px, in English and German: the versions table calls it an increment instead of
"0 bytes", "Put back" explains why it cannot be and offers no form, the diff page says when it
can be compared; nothing scrolls sideways and the keyboard reaches the way back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.versions import ruleset_version_store
from tests.e2e.conftest import staff_context
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)
SHOTS = Path(os.environ.get("PORTAL_SCREENSHOTS", "/nonexistent"))


def stored(host: FirewallHost, text: str, cause: str) -> RuleSetVersion:
    return ruleset_version_store(
        host=host, nft_text=text, tc_text="", content_hash=str(abs(hash(text))).rjust(64, "0"),
        counts={"portal_fw.member_ports": 3}, compile_seconds=0.8, cause=cause,
    )  # fmt: skip


@pytest.fixture
def versions():
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    full = stored(host, "table inet portal_fw {}\n", "reconcile")
    delta = RuleSetVersion.objects.create(
        host=host, content_hash="d" * 64, nft_text="", texts_pending=True, size_bytes=0,
        counts=dict(full.counts), cause="device.add 7",
    )  # fmt: skip
    newer = stored(host, "table inet portal_fw { }\n", "push now (by ada)")
    host.mark_applied(newer)
    UserFactory(username="ada", roles=["admin"])
    return host, full, delta


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("locale", ["en-GB", "de-DE"])
def test_an_increment_reads_and_fits(browser, live_server, versions, width, locale):
    host, full, delta = versions
    context, page = staff_context(
        browser, live_server.url, username="ada", locale=locale, width=width
    )
    german = locale.startswith("de")
    paths = {
        "detail": f"/firewalls/{host.name}/",
        "rollback": f"/firewalls/{host.name}/rollback/?version={delta.pk}",
        "diff": f"/firewalls/{host.name}/diff/?a={full.pk}&b={delta.pk}",
    }
    for name, path in paths.items():
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} at {width}px is {overflow}px too wide"
        if SHOTS.is_dir():
            page.screenshot(
                path=str(SHOTS / f"increment-{name}-{locale}-{width}.png"), full_page=True
            )
    page.goto(paths["detail"])
    badge = page.get_by_test_id("version-increment")
    assert badge.inner_text() == ("Inkrement" if german else "increment")
    assert page.locator(f"a[href$='?version={delta.pk}']").count() == 0
    page.goto(paths["rollback"])
    said = page.get_by_test_id("rollback-increment").inner_text()
    assert ("nicht wieder eingespielt" if german else "it cannot be put back") in said
    assert page.locator("form button[type=submit]", has_text="#").count() == 0
    back = page.get_by_role("button", name="Zurück" if german else "Back")
    for _ in range(40):  # the keyboard reaches it
        page.keyboard.press("Tab")
        if back.evaluate("el => el === document.activeElement"):
            break
    else:
        pytest.fail("Tab never reached the way back")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/firewalls/{host.name}/")
    page.goto(paths["diff"])
    said = page.get_by_test_id("diff-increment").inner_text()
    assert ("lässt sie sich nicht vergleichen" if german else "it cannot be compared") in said
    context.close()
