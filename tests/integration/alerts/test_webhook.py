"""The Alertmanager webhook: who may call it, what it refuses, and how alerts become incidents."""

from __future__ import annotations

import datetime as dt

import pytest
import structlog
from django.test import Client
from django.utils import timezone

from apps.alerts.models import Alert, AlertGroup
from apps.alerts.services import alert_groups_settle
from apps.audit.models import AuditEntry
from apps.tickets.models import Incident
from tests.integration.alerts.conftest import SECRET, alert, message, post

START = dt.datetime(2026, 11, 28, 7, 0, tzinfo=dt.UTC)


def nothing_written() -> bool:
    return not (
        Alert.objects.exists()
        or AlertGroup.objects.exists()
        or Incident.objects.exists()
        or AuditEntry.objects.exists()
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "secret", "status"),
    [
        (message(alert("FailoverNoPrimary", site="north")), "", 401),  # unsigned
        (message(alert("FailoverNoPrimary", site="north")), "guess", 401),
        (b"{not json", SECRET, 400),
        ({"version": "3", "alerts": []}, SECRET, 400),
        (message(), SECRET, 400),  # no alerts
        ({**message(alert("X")), "alerts": [{"status": "burning"}]}, SECRET, 400),
        (message({**alert("X"), "startsAt": "yesterday"}), SECRET, 400),
        (message({**alert("X"), "fingerprint": "'; drop table"}), SECRET, 400),
        (message({**alert("X"), "labels": {"alertname": "X", "bad-name": "1"}}), SECRET, 400),
        (message({**alert("X"), "labels": {"severity": "critical"}}), SECRET, 400),
    ],
)
def test_the_webhook_refuses_unsigned_or_malformed_bodies_and_writes_nothing(
    webhook_secret, site, body, secret, status
):
    with structlog.testing.capture_logs() as logs:
        response = post(Client(), body, secret=secret)
    assert response.status_code == status
    assert "error" in response.json()
    assert nothing_written()
    assert [e["event"] for e in logs] == ["alerts.webhook_refused"]


@pytest.mark.django_db
def test_without_a_configured_secret_every_call_is_refused(settings, site):
    settings.PORTAL_ALERTS_WEBHOOK_SECRET = ""
    response = post(Client(), message(alert("FailoverNoPrimary", site="north")), secret="")
    assert response.status_code == 401
    assert Client().get("/alerts/webhook").status_code == 405
    assert nothing_written()


@pytest.mark.django_db
def test_both_hosts_unreachable_opens_an_incident_for_the_sites_buildings(webhook_secret, site):
    response = post(
        Client(), message(alert("FirewallPairUnreachable", site="north", starts_at=START))
    )
    assert response.status_code == 200, response.content
    incident = Incident.objects.get()
    assert response.json()["opened"] == [incident.pk]
    assert incident.started_at == START
    assert incident.public
    assert incident.ended_at is None
    assert set(incident.buildings.all()) == set(site.buildings.all())
    assert incident.title == "The firewalls of North 1, North 2 do not answer"
    assert incident.title_de == "Die Firewalls von North 1, North 2 antworten nicht"
    assert incident.severity == "critical"
    # Every automatic step is the system's, with the alert's labels.
    steps = AuditEntry.objects.filter(action__startswith="alert.").order_by("id")
    assert [e.action for e in steps] == ["alert.fire", "alert.incident_open"]
    for entry in steps:
        assert entry.actor is None
        assert entry.actor_name == "system"
        assert entry.changes["labels"][1]["alertname"] == "FirewallPairUnreachable"
        assert entry.changes["labels"][1]["site"] == "north"
    declared = AuditEntry.objects.get(action="incident.declare")
    assert declared.actor_name == "system"


@pytest.mark.django_db
def test_an_alert_naming_only_a_host_finds_its_site(webhook_secret, site):
    post(Client(), message(alert("ConntrackTableFull", host="fw-n2")))
    incident = Incident.objects.get()
    assert set(incident.buildings.all()) == set(site.buildings.all())
    assert AlertGroup.objects.get().scope == "north"


@pytest.mark.django_db
def test_an_alert_of_no_known_site_concerns_the_whole_network(webhook_secret, site):
    post(Client(), message(alert("DhcpNotAnswering")))
    incident = Incident.objects.get()
    assert incident.buildings.count() == 0
    assert incident.affected == ["network"]
    assert incident.title == "Devices in the whole network get no address"
    post(Client(), message(alert("SoftirqSaturated", host="unknown-host")))
    assert Incident.objects.count() == 1  # the open whole-network incident takes it


@pytest.mark.django_db
def test_resends_change_nothing_and_another_class_joins_the_open_incident(webhook_secret, site):
    body = message(alert("FailoverNoPrimary", site="north", family="ipv4", starts_at=START))
    for _ in range(3):
        assert post(Client(), body).status_code == 200
    assert Incident.objects.count() == 1
    assert Alert.objects.count() == 1
    incident = Incident.objects.get()
    assert incident.updates.count() == 1  # the opening text
    joined = post(Client(), message(alert("ConntrackTableFull", host="fw-n1")))
    assert joined.json()["joined"] == [incident.pk]
    assert Incident.objects.count() == 1
    assert incident.updates.first().body.startswith("The monitoring also sees:")
    assert AuditEntry.objects.filter(action="alert.incident_join").count() == 1


@pytest.mark.django_db
def test_the_incident_shows_on_the_status_page_and_banner_in_english_and_german(
    webhook_secret, site
):
    post(Client(), message(alert("FirewallPairUnreachable", site="north", starts_at=START)))
    page = Client().get("/status/")
    assert "The firewalls of North 1, North 2 do not answer" in page.content.decode()
    assert "The monitoring noticed this on its own" in page.content.decode()
    german = Client(HTTP_ACCEPT_LANGUAGE="de").get("/status/", headers={"Accept-Language": "de"})
    text = german.content.decode()
    assert "Die Firewalls von North 1, North 2 antworten nicht" in text
    assert "Die Überwachung hat das selbst bemerkt" in text


@pytest.mark.django_db
def test_a_flapping_alert_opens_one_incident_and_says_working_again_once(webhook_secret, site):
    now = timezone.now()
    for cycle in range(5):  # 5 fire/resolve cycles in two minutes, each a new alert start
        start = now + dt.timedelta(seconds=24 * cycle)
        post(Client(), message(alert("FirewallPairUnreachable", site="north", starts_at=start)))
        resolved = alert(
            "FirewallPairUnreachable", site="north", starts_at=start, status="resolved"
        )
        post(Client(), message(resolved))
    incident = Incident.objects.get()
    assert incident.started_at == now  # the first start
    assert incident.updates.count() == 1  # no "working again" inside the hold-down
    assert alert_groups_settle(now=timezone.now()) == 0
    assert alert_groups_settle(now=timezone.now() + dt.timedelta(seconds=121)) == 1
    incident.refresh_from_db()
    assert incident.ended_at is None  # never ended by itself: a person confirms
    working = incident.updates.first()
    assert working.phase == "monitoring"
    assert working.author is None
    assert working.body.startswith("The monitoring sees it working again")
    assert working.body_de.startswith("Die Überwachung sieht, dass es wieder funktioniert")
    assert alert_groups_settle(now=timezone.now() + dt.timedelta(seconds=500)) == 0  # once
    # It breaks again after it had said so: the same incident says it is back.
    later = now + dt.timedelta(minutes=10)
    post(Client(), message(alert("FirewallPairUnreachable", site="north", starts_at=later)))
    assert Incident.objects.count() == 1
    assert incident.updates.first().body == "The monitoring sees the problem again."
    assert AuditEntry.objects.filter(action="alert.working_again", actor=None).count() == 1


@pytest.mark.django_db
def test_after_a_person_ended_the_incident_a_new_episode_opens_a_new_one(
    webhook_secret, site, make_user
):
    from apps.tickets.services import incident_end

    post(Client(), message(alert("FailoverNoPrimary", site="north", starts_at=START)))
    first = Incident.objects.get()
    # Still firing: the person's end stands; resends open nothing.
    incident_end(incident=first, actor=make_user(roles=("support",)))
    post(Client(), message(alert("FailoverNoPrimary", site="north", starts_at=START)))
    assert Incident.objects.count() == 1
    post(
        Client(),
        message(alert("FailoverNoPrimary", site="north", starts_at=START, status="resolved")),
    )
    later = START + dt.timedelta(hours=1)
    post(Client(), message(alert("FailoverNoPrimary", site="north", starts_at=later)))
    assert Incident.objects.count() == 2
    assert Incident.objects.get(ended_at__isnull=True).started_at == later


@pytest.mark.django_db
def test_not_an_outage_hides_the_incident_and_opens_nothing_until_the_alert_resolves(
    webhook_secret, site, make_user
):
    staff = Client()
    person = make_user(roles=("support",))
    staff.force_login(person)
    post(Client(), message(alert("SoftirqSaturated", host="fw-n1", starts_at=START)))
    group = AlertGroup.objects.get()
    incident = group.incident
    response = staff.post(f"/staff/alerts/{group.pk}/not-an-outage/")
    assert response.status_code == 302
    incident.refresh_from_db()
    assert not incident.public
    assert incident.ended_at is not None
    entry = AuditEntry.objects.get(action="alert.not_outage")
    assert entry.actor == person
    # Another alert of the group while it still fires: nothing opens.
    post(Client(), message(alert("SoftirqSaturated", host="fw-n2", starts_at=START)))
    assert Incident.objects.filter(public=True).count() == 0
    # Resolved, then firing again: an outage once more.
    for host in ("fw-n1", "fw-n2"):
        post(
            Client(),
            message(alert("SoftirqSaturated", host=host, starts_at=START, status="resolved")),
        )
    post(
        Client(),
        message(alert("SoftirqSaturated", host="fw-n1", starts_at=START + dt.timedelta(hours=1))),
    )
    assert Incident.objects.filter(public=True, ended_at__isnull=True).count() == 1


@pytest.mark.django_db
def test_members_cannot_mark_an_alert_not_an_outage(webhook_secret, site, client_for):
    post(Client(), message(alert("SoftirqSaturated", host="fw-n1", starts_at=START)))
    group = AlertGroup.objects.get()
    response = client_for("member").post(f"/staff/alerts/{group.pk}/not-an-outage/")
    assert response.status_code in (403, 404)
    group.refresh_from_db()
    assert not group.not_outage
    assert group.incident.public


@pytest.mark.django_db
def test_mails_from_the_sites_members_are_linked_to_the_incident(webhook_secret, site, settings):
    from apps.tickets.services import ReceivedMail, mail_receive_batch
    from tests.factories import MemberFactory, RoomFactory
    from tests.integration.tickets.conftest import make_mail

    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = ["mx.dorm.example"]
    post(Client(), message(alert("FirewallPairUnreachable", site="north", starts_at=START)))
    incident = Incident.objects.get()
    inside = list(site.buildings.all())
    members = [
        MemberFactory(user__email=f"m{i}@example.org", room=RoomFactory(building=inside[i % 2]))
        for i in range(20)
    ]
    mails = [
        ReceivedMail(
            raw=make_mail(
                subject="No internet",
                sender=m.user.email,
                Authentication_Results="mx.dorm.example; dmarc=pass header.from=example.org",
            ).as_bytes(),
            envelope_from=m.user.email,
            envelope_to=["support@localhost"],
        )
        for m in members
    ]
    outcomes = mail_receive_batch(mails)
    assert [o.message.ticket.incident_id for o in outcomes] == [incident.pk] * 20


@pytest.mark.django_db
def test_a_backup_host_down_is_a_staff_warning_never_public(
    webhook_secret, site, make_user, mailoutbox
):
    from apps.alerts.services import alert_warning_mail

    admin = make_user(roles=("admin",), email="admin@example.org")
    make_user(roles=("admin",), email="quiet@example.org")  # did not ask
    staff = Client()
    staff.force_login(admin)
    assert staff.post("/staff/alerts/subscription/", {"on": "1"}).status_code == 302
    post(Client(), message(alert("FirewallHostUnreachable", host="fw-n2", site="north")))
    post(Client(), message(alert("StateSyncLosingMessages", host="fw-n1")))
    assert not Incident.objects.exists()
    assert "fw-n2" not in Client().get("/status/").content.decode()
    page = staff.get("/firewalls/").content.decode()
    assert "one firewall down, the other serving" in page
    assert "state sync losing messages" in page
    assert "Stop mailing me warnings" in page
    group = AlertGroup.objects.get(klass="backup_down")
    assert alert_warning_mail(group_id=group.pk) == 1
    assert mailoutbox[-1].to == ["admin@example.org"]
    assert "host=fw-n2" in mailoutbox[-1].body
    assert "one firewall down" not in client_page_for_member(make_user)


def client_page_for_member(make_user) -> str:
    member = Client()
    member.force_login(make_user(roles=("member",)))
    return member.get("/firewalls/").content.decode()


@pytest.mark.django_db
def test_the_incident_page_shows_the_alert_and_asks_a_person_to_confirm_the_end(
    webhook_secret, site, make_user
):
    staff = Client()
    staff.force_login(make_user(roles=("support",)))
    post(Client(), message(alert("FailoverNoPrimary", site="north", starts_at=START)))
    incident = Incident.objects.get()
    page = staff.get(f"/support/incidents/{incident.pk}/").content.decode()
    assert "no firewall of the pair is primary" in page
    assert 'data-testid="confirm-end"' not in page
    german = staff.get(f"/support/incidents/{incident.pk}/", headers={"Accept-Language": "de"})
    assert "Für North 1, North 2 ist keine Firewall aktiv</h1>" in german.content.decode()
    assert "Die Überwachung hat das selbst bemerkt" in german.content.decode()
    post(
        Client(),
        message(alert("FailoverNoPrimary", site="north", starts_at=START, status="resolved")),
    )
    alert_groups_settle(now=timezone.now() + dt.timedelta(seconds=200))
    page = staff.get(f"/support/incidents/{incident.pk}/").content.decode()
    assert 'data-testid="confirm-end"' in page
    assert "The monitoring sees it working again" in page


@pytest.mark.django_db
def test_the_incident_page_shows_the_signals_around_the_start(webhook_secret, site, make_user):
    from apps.firewall.models import FirewallHost, PushLogEntry, Site
    from apps.health.models import HostHealthSample
    from tests.factories import BuildingFactory

    fw1 = FirewallHost.objects.get(name="fw-n1")
    south = Site.objects.create(name="south")
    south.buildings.set([BuildingFactory(code="S1")])
    other = FirewallHost.objects.create(name="fw-elsewhere", address="10.255.255.99", site=south)
    before = START - dt.timedelta(minutes=2)
    master = {"instances": {"ipv4": {"state": "MASTER"}}}
    HostHealthSample.objects.create(
        host=fw1, at=before, reachable=True, softirq_per_cpu=[0.2, 0.4], conntrack_count=500,
        conntrack_max=1000, conntrack_stats={"drop": 1}, ha=master,
    )  # fmt: skip
    HostHealthSample.objects.create(
        host=fw1, at=START, reachable=True, softirq_per_cpu=[0.97, 0.1], conntrack_count=990,
        conntrack_max=1000, conntrack_stats={"drop": 41}, ha={"instances": {"ipv4": {"state": "FAULT"}}},
    )  # fmt: skip
    HostHealthSample.objects.create(host=other, at=START, reachable=False)
    HostHealthSample.objects.create(host=fw1, at=START - dt.timedelta(hours=2), reachable=False)
    PushLogEntry.objects.create(host=fw1, step="apply", ok=False, message="nft: busy", at=before)
    post(Client(), message(alert("SoftirqSaturated", host="fw-n1", starts_at=START)))
    staff = Client()
    staff.force_login(make_user(roles=("support",)))
    incident = Incident.objects.get()
    page = staff.get(f"/support/incidents/{incident.pk}/").content.decode()
    assert "softirq per core: 97% 10%" in page
    assert "conntrack 990 of 1000" in page
    assert "40 new connections dropped" in page
    assert "ipv4: MASTER → FAULT" in page
    assert "apply: failed (nft: busy)" in page
    assert "fw-elsewhere" not in page  # another site's host
    assert page.count('data-testid="signal-sample"') == 2  # not the sample two hours before
