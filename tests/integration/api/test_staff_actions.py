"""API: the staff actions beyond the member page: firewalls (push now, rollback, unpin), test
accesses (end with a note), tickets' fields, incident updates and links, and the Test button."""

import datetime as dt

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.firewall.models import FirewallHost
from apps.tickets.models import Incident, Queue, Ticket, TicketEvent
from tests.factories import device_add, forward_add, member_active, member_on_test
from tests.integration.api.helpers import login
from tests.integration.firewall.test_views import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def test_firewall_actions_are_for_admins_and_audited_like_the_pages(
    make_user, host, settings, django_capture_on_commit_callbacks, firewall_redis_clean
):
    old, new = store(host, "old"), store(host, "new")
    host.mark_applied(new)
    for role in ("member", "volunteer", "support"):
        client = login(make_user(roles=(role,)))
        assert client.post("/api/firewalls/push-now/").status_code == 403
        assert (
            client.post(f"/api/firewalls/{host.name}/rollback/", {"version": old.pk}).status_code
            == 403
        )
        assert client.post(f"/api/firewalls/{host.name}/unpin/").status_code == 403
    assert not AuditEntry.objects.exists()
    member = login(make_user(roles=("member",)))
    assert member.get("/api/firewalls/").status_code == 403
    volunteer = login(make_user(roles=("volunteer",)))
    listed = volunteer.get("/api/firewalls/").json()
    assert listed["results"][0]["applied_version"] == new.pk
    versions = volunteer.get(f"/api/firewalls/{host.name}/versions/").json()
    assert [v["id"] for v in versions["results"]] == [new.pk, old.pk]

    admin = login(make_user(roles=("admin",)))
    settings.PORTAL_FIREWALL_DEBOUNCE = 30
    with django_capture_on_commit_callbacks(execute=True):
        pushed = admin.post("/api/firewalls/push-now/")
    assert pushed.status_code == 202
    request_id = pushed.json()["request_id"]
    outcome = admin.get(f"/api/firewalls/push-now/{request_id}/")
    assert outcome.status_code == 200
    assert admin.get("/api/firewalls/push-now/nope/").status_code == 404

    url = f"/api/firewalls/{host.name}/rollback/"
    assert admin.post(url, {"version": 0}, content_type="application/json").status_code == 400
    other = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12")
    foreign = store(other, "theirs")
    refused = admin.post(url, {"version": foreign.pk}, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["version"]
    assert FirewallHost.objects.get(pk=host.pk).pinned_version_id is None
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        pinned = admin.post(url, {"version": old.pk}, content_type="application/json")
    assert pinned.status_code == 202
    assert pinned.json()["pinned_version"] == old.pk
    assert len(callbacks) == 1  # the rollback task, after the commit
    with django_capture_on_commit_callbacks(execute=True):
        unpinned = admin.post(f"/api/firewalls/{host.name}/unpin/")
    assert unpinned.json()["pinned_version"] is None
    assert admin.post("/api/firewalls/nope/unpin/").status_code == 404
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["firewall.push_now", "firewall.pin", "firewall.unpin"]


def test_test_access_end_takes_the_note_into_the_trail(make_user):
    member = member_on_test()
    staff = login(make_user(roles=("volunteer",)))
    own = login(member.user)
    assert own.delete(f"/api/test-accesses/{member.pk}/").status_code == 403
    too_long = staff.delete(
        f"/api/test-accesses/{member.pk}/", {"note": "x" * 201}, content_type="application/json"
    )
    assert too_long.status_code == 400
    assert too_long.json()["note"]
    ended = staff.delete(
        f"/api/test-accesses/{member.pk}/", {"note": "no show"}, content_type="application/json"
    )
    assert ended.status_code == 204
    row = AuditEntry.objects.filter(member=member).order_by("-pk").first()
    assert row.action == "member.pending"
    assert row.changes["note"] == [None, "no show"]


def test_extending_beyond_the_maximum_is_400_and_nothing_changes(make_user):
    member = member_on_test()
    until = member.test_access_until
    staff = login(make_user(roles=("volunteer",)))
    far = timezone.localdate() + dt.timedelta(days=3650)
    response = staff.patch(
        f"/api/test-accesses/{member.pk}/",
        {"until": far.isoformat()},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["until"]
    member.refresh_from_db()
    assert member.test_access_until == until


def _ticket(requester) -> Ticket:
    from apps.tickets.services import ticket_open

    return ticket_open(actor=requester, subject="No internet", body="since noon")


def test_ticket_fields_are_for_support_and_each_change_is_an_event(make_user):
    member = member_active()
    ticket = _ticket(member.user)
    support_user = make_user(roles=("support",))
    support = login(support_user)
    queue = Queue.objects.create(slug="network", name="Network")
    url = f"/api/tickets/{ticket.pk}/fields/"
    assert (
        login(member.user).patch(url, {"tags": ["x"]}, content_type="application/json").status_code
        == 403
    )
    changed = support.patch(
        url,
        {"status": "open", "assignee": support_user.pk, "queue": "network", "tags": ["Wifi", "a"]},
        content_type="application/json",
    )
    assert changed.status_code == 200, changed.content
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee_id, ticket.queue_id, ticket.tags) == (
        "open",
        support_user.pk,
        queue.pk,
        ["a", "wifi"],
    )
    event = TicketEvent.objects.filter(ticket=ticket, action="ticket.update").get()
    assert event.actor == support_user
    assert "queue=network" in event.detail
    bad = support.patch(
        url, {"queue": "nope", "assignee": member.user.pk}, content_type="application/json"
    )
    assert bad.status_code == 400
    assert set(bad.json()) == {"queue", "assignee"}
    ticket.refresh_from_db()
    assert ticket.queue_id == queue.pk
    assert (
        support.patch(
            "/api/tickets/999999/fields/", {}, content_type="application/json"
        ).status_code
        == 404
    )


def test_incident_updates_and_links_are_for_support(make_user):
    member = member_active()
    ticket = _ticket(member.user)
    support = login(make_user(roles=("support",)))
    incident = Incident.objects.create(title="Outage A", started_at=timezone.now())
    for client in (login(member.user), login(make_user(roles=("volunteer",)))):
        assert client.post(f"/api/incidents/{incident.pk}/updates/", {}).status_code == 403
        assert client.post(f"/api/incidents/{incident.pk}/tickets/", {}).status_code == 403
    empty = support.post(
        f"/api/incidents/{incident.pk}/updates/",
        {"body": "  ", "phase": "identified"},
        content_type="application/json",
    )
    assert empty.status_code == 400
    assert not incident.updates.exists()
    posted = support.post(
        f"/api/incidents/{incident.pk}/updates/",
        {"body": "Switch replaced", "phase": "identified"},
        content_type="application/json",
    )
    assert posted.status_code == 201
    assert incident.updates.get().body == "Switch replaced"
    linked = support.post(
        f"/api/incidents/{incident.pk}/tickets/",
        {"tickets": [ticket.pk, 999999]},
        content_type="application/json",
    )
    assert linked.json() == {"linked": 1, "missing": [999999]}
    ticket.refresh_from_db()
    assert ticket.incident_id == incident.pk
    none = support.post(
        f"/api/incidents/{incident.pk}/tickets/",
        {"tickets": [999999]},
        content_type="application/json",
    )
    assert none.status_code == 400
    assert support.delete(f"/api/incidents/{incident.pk}/tickets/{ticket.pk}/").status_code == 204
    ticket.refresh_from_db()
    assert ticket.incident_id is None
    assert support.delete(f"/api/incidents/{incident.pk}/tickets/{ticket.pk}/").status_code == 404
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions[-3:] == ["incident.update", "ticket.incident_link", "ticket.incident_link"]


def test_the_test_button_answers_why_it_cannot_run_and_only_for_own_forwards(make_user):
    member, other = member_active(), member_active()
    forward = forward_add(member)
    opening_device = device_add(member)
    client = login(member.user)
    response = client.post(f"/api/port-forwards/{forward.pk}/test/")
    assert response.status_code == 400
    assert "probe host" in response.json()["non_field_errors"][0]
    assert login(other.user).post(f"/api/port-forwards/{forward.pk}/test/").status_code == 404
    assert client.post("/api/ipv6-openings/999999/test/").status_code == 404
    assert opening_device.member_id == member.pk


def test_inbox_bulk_actions_through_the_api_are_for_support(make_user):
    member = member_active()
    first, second = _ticket(member.user), _ticket(member.user)
    support_user = make_user(roles=("support",))
    support = login(support_user)
    body = {"tickets": [first.pk, second.pk], "action": "assign_me"}
    assert (
        login(member.user)
        .post("/api/tickets/bulk/", body, content_type="application/json")
        .status_code
        == 403
    )
    done = support.post("/api/tickets/bulk/", body, content_type="application/json")
    assert done.json() == {"changed": 2}
    assert set(Ticket.objects.values_list("assignee", flat=True)) == {support_user.pk}
    refused = support.post(
        "/api/tickets/bulk/",
        {"tickets": [first.pk], "action": "incident", "value": "#999999"},
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert refused.json()["value"]
    first.refresh_from_db()
    assert first.incident_id is None
    unknown = support.post(
        "/api/tickets/bulk/",
        {"tickets": [first.pk], "action": "delete"},
        content_type="application/json",
    )
    assert unknown.status_code == 400


def test_quarantined_mail_is_listed_and_dismissed_by_support(make_user):
    from apps.tickets.models import InboundMail

    mail = InboundMail.objects.create(
        raw=b"Subject: x\r\n\r\nbroken body", size=20, status="quarantined", error="broken MIME"
    )
    support_user = make_user(roles=("support",))
    support = login(support_user)
    assert login(make_user(roles=("volunteer",))).get("/api/quarantine/").status_code == 403
    listed = support.get("/api/quarantine/").json()
    assert [m["error"] for m in listed["results"]] == ["broken MIME"]
    dismissed = support.post(f"/api/quarantine/{mail.pk}/dismiss/")
    assert dismissed.json()["status"] == "dismissed"
    mail.refresh_from_db()
    assert mail.handled_by == support_user
    assert AuditEntry.objects.filter(action="mail.dismiss", actor=support_user).exists()
    assert support.post(f"/api/quarantine/{mail.pk}/dismiss/").status_code == 404


def test_a_forward_without_public_address_says_so_on_the_page_and_in_the_api():
    from apps.network.models import PortForward

    member = member_active()
    forward = forward_add(member)
    # Released with the membership's public IPv4: disabled, no address.
    PortForward.objects.filter(pk=forward.pk).update(public_address=None, enabled=False)
    client = login(member.user)
    api = client.post(f"/api/port-forwards/{forward.pk}/test/")
    assert api.status_code == 400
    assert "no public address" in api.json()["non_field_errors"][0]
    page = client.post(f"/port-forwards/{forward.pk}/test/", HTTP_HX_REQUEST="true")
    assert page.status_code < 500
    assert "no public address" in page.content.decode()


def test_the_api_refuses_to_put_back_a_version_pushed_as_an_increment(make_user, host):
    from apps.firewall.models import RuleSetVersion

    delta = RuleSetVersion.objects.create(
        host=host, content_hash="d" * 64, nft_text="", texts_pending=True, counts={}
    )
    admin = login(make_user(roles=("admin",)))
    url = f"/api/firewalls/{host.name}/rollback/"
    refused = admin.post(url, {"version": delta.pk}, content_type="application/json")
    assert refused.status_code == 400
    assert "pushed as an increment" in refused.json()["version"][0]
    assert FirewallHost.objects.get(pk=host.pk).pinned_version_id is None
    assert not AuditEntry.objects.filter(action="firewall.pin").exists()
