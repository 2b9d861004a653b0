"""Test access: a member status with a shaping profile and a last day; grant, extend, end;
the beat task mails once N days before and ends expired ones (direct task calls, locmem mail)."""

import datetime as dt
from unittest import mock

import pytest
from django.core import mail
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.members.services import member_check_in
from apps.network.errors import MemberStateError
from apps.network.models import NetworkSettings, PublicAddress, ShapingProfile
from apps.notifications.services import notices_mail_flush
from apps.testaccess import tasks
from apps.testaccess.models import TestAccess
from apps.testaccess.services import (
    member_test_access_end,
    member_test_access_extend,
    member_test_access_grant,
)
from tests.factories import MemberFactory, device_add, member_on_test, pool_create

pytestmark = pytest.mark.django_db

TODAY = timezone.localdate()


@pytest.fixture
def slow():
    return ShapingProfile.objects.create(name="Slow", down_kbit=2000, up_kbit=500)


def test_grant_with_a_profile_assigns_the_public_address(slow):
    pool_create()
    member = MemberFactory()
    until = TODAY + dt.timedelta(days=10)
    member = member_test_access_grant(member=member, until=until, profile=slow, actor=None)
    assert member.status == MemberStatus.TEST
    assert member.test_access_until == until
    assert member.test_access.profile == slow
    assert PublicAddress.objects.filter(member=member).exists()
    assert AuditEntry.objects.filter(action="member.test_access_profile", member=member).exists()


def test_grant_without_a_profile_uses_the_default():
    member = member_on_test()
    assert member.test_access.profile == ShapingProfile.default()
    assert member.test_access.profile.is_default


def test_grant_refuses_today_and_active_members():
    pool_create()
    member = MemberFactory()
    with pytest.raises(MemberStateError, match="after today"):
        member_test_access_grant(member=member, until=TODAY, actor=None)
    member = member_check_in(member=member, actor=None)
    with pytest.raises(MemberStateError):
        member_test_access_grant(member=member, until=TODAY + dt.timedelta(1), actor=None)


def test_extend_moves_the_end_and_may_change_the_profile(slow):
    member = member_on_test(days=2)
    member = member_test_access_extend(
        member=member, until=TODAY + dt.timedelta(days=20), profile=slow, actor=None
    )
    member.refresh_from_db()
    assert member.test_access_until == TODAY + dt.timedelta(days=20)
    assert TestAccess.objects.get(member=member).profile == slow
    entry = AuditEntry.objects.get(action="member.test_access_extend", member=member)
    assert set(entry.changes) == {"test_access_until", "profile"}


def test_extend_needs_a_running_test_access():
    pool_create()
    with pytest.raises(MemberStateError):
        member_test_access_extend(
            member=MemberFactory(), until=TODAY + dt.timedelta(days=3), actor=None
        )


def test_end_returns_to_pending_and_quarantines_the_address():
    member = member_on_test()
    device_add(member)
    member = member_test_access_end(member=member, actor=None)
    assert member.status == MemberStatus.PENDING
    assert member.test_access_until is None
    assert not TestAccess.objects.filter(member=member).exists()
    assert not PublicAddress.objects.filter(member=member).exists()
    assert member.devices.count() == 1


def test_check_in_ends_the_shaping():
    member = member_on_test()
    member_check_in(member=member, actor=None)
    assert not TestAccess.objects.filter(member=member).exists()


def test_grant_extend_end_each_call_the_hook_once(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_on_test()
    for action in (
        lambda: member_test_access_extend(
            member=member, until=TODAY + dt.timedelta(days=30), actor=None
        ),
        lambda: member_test_access_end(member=member, actor=None),
    ):
        with (
            mock.patch("apps.network.hooks.network_changed") as hook,
            django_capture_on_commit_callbacks(execute=True),
        ):
            action()
        assert hook.call_count == 1


def _run_task(django_capture_on_commit_callbacks, today):
    with (
        mock.patch("django.utils.timezone.localdate", return_value=today),
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = tasks.expire_test_accesses()
    # The notice's mail goes out with the next flush of apps.notifications (on that day).
    noon = dt.datetime.combine(today, dt.time(12), tzinfo=timezone.get_current_timezone())
    notices_mail_flush(now=noon)
    return result


def test_task_ends_expired_test_accesses_through_the_service(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ending = member_on_test(days=1)
        later = member_on_test(days=10)
    # The last day itself is still inside the test access.
    assert _run_task(django_capture_on_commit_callbacks, TODAY + dt.timedelta(days=1))["ended"] == 0
    with mock.patch("apps.network.hooks.network_changed") as hook:
        result = _run_task(django_capture_on_commit_callbacks, TODAY + dt.timedelta(days=2))
    assert result["ended"] == 1
    assert hook.call_count == 1
    ending.refresh_from_db()
    later.refresh_from_db()
    assert ending.status == MemberStatus.PENDING
    assert later.status == MemberStatus.TEST
    entry = ending.status_changes.first()
    assert entry.new_status == MemberStatus.PENDING
    assert "expired" in entry.note
    assert AuditEntry.objects.filter(action="member.pending", member=ending).exists()
    assert _run_task(django_capture_on_commit_callbacks, TODAY + dt.timedelta(days=2))["ended"] == 0


def test_task_mails_once_n_days_before(django_capture_on_commit_callbacks):
    NetworkSettings.objects.filter(pk=1).update(test_access_notice_days=3)
    with django_capture_on_commit_callbacks(execute=True):
        member = member_on_test(days=10)
    until = member.test_access_until
    assert _run_task(django_capture_on_commit_callbacks, until - dt.timedelta(days=4)) == {
        "noticed": 0,
        "ended": 0,
    }
    assert (
        _run_task(django_capture_on_commit_callbacks, until - dt.timedelta(days=3))["noticed"] == 1
    )
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == [member.user.email]
    assert "test access" in message.body.lower()
    assert "Testzugang" in message.body
    # Again the same day, and on the following days: nothing more.
    for days in (3, 2, 0):
        _run_task(django_capture_on_commit_callbacks, until - dt.timedelta(days=days))
    assert len(mail.outbox) == 1
    # An extension makes a new notice due for the new end.
    member_test_access_extend(member=member, until=until + dt.timedelta(days=7), actor=None)
    _run_task(django_capture_on_commit_callbacks, until + dt.timedelta(days=4))
    assert len(mail.outbox) == 2


def test_a_test_access_longer_than_the_admin_setting_is_refused_and_changes_nothing():
    pool_create()
    member = MemberFactory()
    seven_months = TODAY + dt.timedelta(days=210)
    with pytest.raises(MemberStateError, match="at most 60 days") as refused:
        member_test_access_grant(member=member, until=seven_months, actor=None)
    assert refused.value.field == "until"
    member.refresh_from_db()
    assert member.status == MemberStatus.PENDING
    assert not PublicAddress.objects.filter(member=member).exists()
    NetworkSettings.objects.filter(pk=1).update(test_access_max_days=240)
    member = member_test_access_grant(member=member, until=seven_months, actor=None)
    assert member.test_access_until == seven_months


def test_extending_beyond_the_longest_test_access_is_refused():
    member = member_on_test()
    with pytest.raises(MemberStateError, match="at most 60 days"):
        member_test_access_extend(member=member, until=TODAY + dt.timedelta(days=61), actor=None)
    member = member_test_access_extend(
        member=member, until=TODAY + dt.timedelta(days=60), actor=None
    )
    assert member.test_access_until == TODAY + dt.timedelta(days=60)


def test_the_same_grant_twice_writes_one_history_entry():
    from apps.members.models import StatusChange

    pool_create()
    member = MemberFactory()
    until = TODAY + dt.timedelta(days=14)
    member_test_access_grant(member=member, until=until, actor=None)
    member_test_access_grant(member=member, until=until, actor=None)  # a double submit
    assert StatusChange.objects.filter(member=member, new_status=MemberStatus.TEST).count() == 1
