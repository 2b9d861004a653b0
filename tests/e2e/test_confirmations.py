"""Issue 25's confirmations: a form checks what the browser can check before it asks (an empty
suspend reason), "End incident" asks first, and "Remove device?" names its forwards and
openings that go with it."""

import re

import pytest
from playwright.sync_api import expect

from apps.members.choices import MemberStatus
from apps.tickets.models import Incident
from tests import factories
from tests.factories import PASSWORD, UserFactory, member_active, pool_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_suspend_with_an_empty_reason_is_refused_before_anything_is_asked(page, login):
    pool_create()
    UserFactory(username="vic", roles=["volunteer"])
    member = member_active()
    login("vic", PASSWORD)
    page.goto(f"/office-hours/members/{member.pk}/")
    page.get_by_text("Suspend", exact=True).first.click()
    asked: list[str] = []
    page.on("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Suspend", exact=True).click()
    reason = page.get_by_label("Reason")
    expect(reason).to_be_focused()  # the browser points at the empty field
    assert reason.evaluate("el => el.validity.valueMissing")
    assert asked == []  # no "Suspend …?" for an action that would be refused
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE


def test_end_incident_asks_first(page, login):
    from apps.tickets.services import incident_declare

    sam = UserFactory(username="sam", roles=["support"])
    incident = incident_declare(actor=sam, title="Fiber cut")
    login("sam", PASSWORD)
    page.goto(f"/support/incidents/{incident.pk}/")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.get_by_test_id("end-incident").click()
    expect(page.get_by_test_id("end-incident")).to_be_visible()
    assert len(asked) == 1
    assert "End this incident?" in asked[0]
    incident.refresh_from_db()
    assert incident.ended_at is None  # dismissed: nothing sent
    page.once("dialog", lambda d: d.accept())
    page.get_by_test_id("end-incident").click()
    expect(page).to_have_url(re.compile(rf"/support/incidents/{incident.pk}/"))
    expect(page.get_by_test_id("end-incident")).to_have_count(0)
    assert Incident.objects.get(pk=incident.pk).ended_at is not None


def test_remove_device_names_the_forwards_and_openings_that_go_with_it(page, login):
    pool_create()
    member = member_active()
    device = factories.device_add(member, "server")
    factories.forward_add(member, device, ports="8080")
    factories.forward_add(member, device, ports="8081")
    factories.opening_add(device, ports="443")
    member.user.set_password(PASSWORD)
    member.user.save()
    login(member.user.username, PASSWORD)
    page.goto("/me/")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Remove server").click()
    expect(page.get_by_role("button", name="Remove server")).to_be_visible()
    assert asked == [
        "Remove server? It loses its addresses, and its port forwards (2) and IPv6 openings (1) "
        "are deleted with it."
    ]
