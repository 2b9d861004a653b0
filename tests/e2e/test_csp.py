"""The Content-Security-Policy in the browser: the main pages, as a member and as staff, with
htmx actions, raise no `securitypolicyviolation` and log no CSP error to the console."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.firewall.models import FirewallHost
from apps.tickets.models import Incident
from apps.tickets.services import ticket_open
from tests.factories import PASSWORD, UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)

# Runs before any page script (CDP, not subject to the page's policy): every violation is
# written to the console, where the listener below collects it across navigations.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"} ` +
                `at ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def watched(browser, live_server):
    """A browser context whose CSP violations (events and Chromium's own messages) are kept,
    from every page (tab) of the context."""
    violations: list[str] = []
    contexts = []

    def on_console(msg) -> None:
        if "CSP violation" in msg.text or "Content Security Policy" in msg.text:
            violations.append(f"{msg.page.url if msg.page else '?'}: {msg.text}")

    def open_as(username: str | None):
        context = browser.new_context(
            base_url=live_server.url, locale="en-GB", viewport={"width": 1280, "height": 900}
        )
        context.set_default_timeout(10000)
        context.add_init_script(REPORT_VIOLATIONS)
        context.on("console", on_console)
        contexts.append(context)
        page = context.new_page()
        if username:
            page.goto("/accounts/login/")
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            expect(page.get_by_test_id("logout")).to_be_visible()
        return page

    yield open_as, violations
    for context in contexts:
        context.close()


def visit(page, path: str) -> None:
    response = page.goto(path)
    assert response is not None
    assert response.status < 500, path
    assert response.headers.get("content-security-policy"), f"no policy on {path}"
    page.wait_for_load_state("networkidle")


def visit_all(page, paths) -> list:
    """visit() each path, each in a tab of its own in page's context, all at once: the pages
    load and go quiet side by side instead of one after the other (each is still watched
    until it has had no request for 500 ms). The tabs stay open; the caller closes them."""
    tabs = []
    for path in paths:
        tab = page.context.new_page()
        tabs.append((tab, path, tab.goto(path, wait_until="commit")))
    for tab, path, response in tabs:
        assert response is not None
        assert response.status < 500, path
        assert response.headers.get("content-security-policy"), f"no policy on {path}"
        tab.wait_for_load_state("networkidle")
    return [tab for tab, _path, _response in tabs]


def test_no_page_violates_the_policy(django_db_setup, watched):
    open_as, violations = watched
    member = member_active()
    member.user.username = "rita"
    member.user.set_password(PASSWORD)
    member.user.save()
    device_add(member, "laptop")
    ticket = ticket_open(actor=member.user, subject="Slow Wi-Fi", body="Since yesterday.")
    incident = Incident.objects.create(title="Uplink down")
    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    UserFactory(username="ada", roles=["admin"])
    UserFactory(username="vic", roles=["volunteer"])

    # Public pages.
    page = open_as(None)
    visit_all(page, ("/accounts/login/", "/signup/", "/status/", "/accounts/password_reset/"))

    # A member: pages, and htmx actions (edit a device in place, cancel).
    page = open_as("rita")
    tabs = visit_all(
        page, ("/tickets/", f"/tickets/{ticket.pk}/", "/me/notices/", "/accounts/two-factor/")
    )
    for tab in tabs:
        tab.close()
    visit(page, "/me/")
    page.get_by_role("button", name="Change laptop").click()
    expect(page.locator("#devices form.device-form").first).to_be_visible()
    page.locator("#devices").get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("button", name="Change laptop")).to_be_visible()
    page.get_by_label("Language").select_option("de")  # the language switch's own script
    expect(page.locator("html")).to_have_attribute("lang", "de")
    page.get_by_label("Sprache").select_option("en")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    visit(page, "/api/docs/")
    expect(page.locator(".swagger-ui .info")).to_be_visible()

    # A volunteer: office hours with the htmx search.
    page = open_as("vic")
    visit(page, "/office-hours/")
    page.get_by_role("searchbox", name="Find a person").fill(member.room.label)
    expect(page.locator("#search-results")).to_contain_text(member.user.get_full_name())
    visit(page, f"/office-hours/members/{member.pk}/")

    # An admin: staff pages (charts, polling), the system page and the Django admin.
    page = open_as("ada")
    tabs = visit_all(
        page,
        (
            "/firewalls/",
            "/firewalls/pl-nat1/",
            "/support/tickets/",
            f"/support/tickets/{ticket.pk}/",
            "/support/incidents/",
            f"/support/incidents/{incident.pk}/",
            "/support/stats/",
            "/system/",
            "/admin/",
            "/admin/auth/user/",
            f"/admin/auth/user/{member.user.pk}/change/",
            "/admin/members/member/",
        ),
    )
    # let the polling badges (htmx, every 1-10 s) swap once, on every staff page at once
    page.wait_for_timeout(1500)
    for tab in tabs:
        tab.close()

    assert violations == [], "\n".join(violations)


def test_a_violation_would_be_caught(django_db_setup, watched, live_server):
    """The watcher works: an inline script the policy blocks is reported, also from a tab that
    visit_all() opened."""
    open_as, violations = watched
    page = open_as(None)
    (page,) = visit_all(page, ["/accounts/login/"])
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.x = 1'; document.body.append(s); }"
    )
    page.wait_for_timeout(200)
    assert any(re.search(r"script-src", v) for v in violations), violations
