"""What makes notices: an incident declared for a building (only its members), and a change of
a forward, opening or device that failed to go live or went live late."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.core import mail
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.notifications.choices import LiveOutcome, MailStatus, NoticeKind
from apps.notifications.models import LiveCheck, Notice
from apps.notifications.services import (
    incident_notices_create,
    live_checks_run,
    notices_mail_flush,
)
from apps.tickets.services import incident_declare
from tests.factories import (
    BuildingFactory,
    MemberFactory,
    RoomFactory,
    confirm_everywhere,
    device_add,
    forward_add,
    member_active,
    opening_add,
)

pytestmark = pytest.mark.django_db


# --- incidents ----------------------------------------------------------------------------------


def test_an_incident_for_building_x_tells_only_the_members_of_x(django_capture_on_commit_callbacks):
    x, y = BuildingFactory(code="X"), BuildingFactory(code="Y")
    in_x = [MemberFactory(room=RoomFactory(building=x)) for _ in range(3)]
    in_y = MemberFactory(room=RoomFactory(building=y))
    gone = MemberFactory(room=RoomFactory(building=x))
    gone.status, gone.room = MemberStatus.ENDED, None
    gone.save()
    with (
        mock.patch("apps.tickets.dispatch.incident_notices_create") as task,
        django_capture_on_commit_callbacks(execute=True),
    ):
        incident = incident_declare(actor=None, title="Switch in X dead", buildings=[x])
    # The request only queued the task: no notice is made while it runs.
    task.assert_called_once_with(incident.pk)
    assert not Notice.objects.exists()

    assert incident_notices_create(incident_id=incident.pk) == 3
    told = set(Notice.objects.values_list("member_id", flat=True))
    assert told == {m.pk for m in in_x}
    assert in_y.pk not in told
    notice = Notice.objects.filter(member=in_x[0]).get()
    assert notice.kind == NoticeKind.INCIDENT
    assert "Switch in X dead" in notice.title
    assert AuditEntry.objects.filter(action="notice.incident", object_id=str(incident.pk)).exists()

    # The task delivered twice tells nobody twice.
    incident_notices_create(incident_id=incident.pk)
    assert Notice.objects.count() == 3

    assert notices_mail_flush() == 3
    assert sorted(m.to[0] for m in mail.outbox) == sorted(m.user.email for m in in_x)
    assert "Switch in X dead" in mail.outbox[0].subject


def test_an_incident_without_buildings_or_not_public_tells_nobody(
    django_capture_on_commit_callbacks,
):
    x = BuildingFactory(code="X")
    MemberFactory(room=RoomFactory(building=x))
    with (
        mock.patch("apps.tickets.dispatch.incident_notices_create") as task,
        django_capture_on_commit_callbacks(execute=True),
    ):
        everywhere = incident_declare(actor=None, title="Mail server slow")
        internal = incident_declare(actor=None, title="Drill", buildings=[x], public=False)
    task.assert_not_called()
    assert incident_notices_create(incident_id=everywhere.pk) == 0
    assert incident_notices_create(incident_id=internal.pk) == 0
    assert not Notice.objects.exists()


# --- live state -------------------------------------------------------------------------------


def test_a_forward_that_failed_to_go_live_tells_its_member_once(hosts):
    member = member_active()
    forward = forward_add(member, ports="8080")
    assert live_checks_run() == []  # pending on both hosts: nothing to tell yet
    hosts[1].mark_error("apply: nft: syntax error in line 12")  # one host failing is enough
    other = member_active()
    forward_add(other, ports="9090")  # changed after the failed push: still pending

    made = live_checks_run()
    assert {n.member_id for n in made} == {member.pk}
    assert {n.params["what"] for n in made} == {"device", "forward"}  # the forward's device too
    notice = Notice.objects.get(member=member, kind=NoticeKind.LIVE, params__what="forward")
    assert notice.params["outcome"] == LiveOutcome.FAILED
    assert notice.params["object_id"] == forward.pk
    assert "did not go live" in notice.title
    assert "syntax error" in notice.body
    assert LiveCheck.objects.get(object_id=forward.pk, what="forward").outcome == "failed"
    assert AuditEntry.objects.filter(action="notice.live_failed", member=member).count() == 2

    assert live_checks_run() == []  # decided once per change
    assert Notice.objects.filter(member=member).count() == 2
    assert notices_mail_flush() == 1  # both in one mail
    assert mail.outbox[0].to == [member.user.email]
    assert "2 notices" in mail.outbox[0].subject
    assert "syntax error" in mail.outbox[0].body

    # The member changes the forward again: a new change is a new decision.
    from apps.network.services import port_forward_change

    port_forward_change(forward=forward, actor=member.user, description="web")
    hosts[0].mark_error("connect: timed out", unreachable=True)
    assert [n.params["object_id"] for n in live_checks_run() if n.member_id == member.pk] == [
        forward.pk
    ]


def test_a_change_live_later_than_the_setting_is_late_one_in_time_is_not(hosts, settings):
    settings.PORTAL_NOTIFICATIONS_LIVE_LATE_SECONDS = 60
    member = member_active()
    device = device_add(member)
    opening = opening_add(device, ports="443")
    forward = forward_add(member, device=device, ports="8443")
    changed = max(device.updated_at, opening.updated_at, forward.updated_at)
    confirm_everywhere(changed, confirmed_after=125)
    made = live_checks_run(now=changed + dt.timedelta(seconds=130))
    assert {n.params["what"] for n in made} == {"device", "forward", "opening"}
    late = Notice.objects.get(params__what="opening")
    assert late.params["outcome"] == LiveOutcome.LATE
    assert late.params["delay"] >= 120
    assert "later than usual" in late.title
    assert "2 minutes" in late.body
    assert device.name in late.params["label"]

    # In time: decided, no notice.
    in_time = forward_add(member, device=device, ports="9443")
    confirm_everywhere(in_time.updated_at, confirmed_after=3)
    assert live_checks_run(now=in_time.updated_at + dt.timedelta(seconds=5)) == []
    assert LiveCheck.objects.get(what="forward", object_id=in_time.pk).outcome == "on_time"
    assert Notice.objects.filter(mail_status=MailStatus.PENDING).count() == 3


def test_a_disabled_forward_is_not_a_failure(hosts):
    member = member_active()
    forward = forward_add(member, ports="8081", enabled=False)
    for host in hosts:
        host.mark_error("apply: boom")
    assert [n.params["what"] for n in live_checks_run()] == ["device"]  # its device is in force
    assert LiveCheck.objects.get(what="forward", object_id=forward.pk).outcome == "off"


def test_changes_older_than_the_window_are_forgotten(hosts, settings):
    settings.PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS = 600
    member = member_active()
    forward = forward_add(member, ports="8082")
    for host in hosts:
        host.mark_error("apply: boom")
    later = timezone.now() + dt.timedelta(seconds=700)
    assert live_checks_run(now=later) == []
    assert not LiveCheck.objects.filter(object_id=forward.pk).exists()


# --- test access ending -------------------------------------------------------------------------


def test_the_test_access_notice_is_a_notice_in_the_members_language():
    from apps.network.models import NetworkSettings
    from apps.notifications.services import preference_update
    from apps.testaccess.services import expiring_test_accesses_notify
    from tests.factories import member_on_test

    NetworkSettings.objects.filter(pk=1).update(test_access_notice_days=3)
    member = member_on_test(days=2)
    preference_update(member=member, language="de", mail={}, actor=member.user)
    assert expiring_test_accesses_notify() == [member.pk]
    assert expiring_test_accesses_notify() == []  # once per end date
    notice = Notice.objects.get(member=member)
    assert notice.kind == NoticeKind.TEST_ACCESS
    assert notice.params == {"until": member.test_access_until.isoformat()}
    assert notices_mail_flush() == 1
    assert mail.outbox[0].subject.startswith("Ihr Testzugang endet am")
    assert "Your test access" not in mail.outbox[0].body
