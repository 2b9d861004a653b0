"""Notices become mail in batches: at most one mail per member, kind and hour, in the member's
language, never when the member turned that kind off (the notice is made all the same)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from apps.notifications.choices import MailStatus, NoticeKind
from apps.notifications.models import Notice
from apps.notifications.services import notice_create, notices_mail_flush, preference_update
from tests.factories import MemberFactory

pytestmark = pytest.mark.django_db


def incident(member, n, **extra):
    return notice_create(
        member=member,
        kind=NoticeKind.INCIDENT,
        params={
            "title": f"Outage {n}",
            "buildings": ["A"],
            "started_at": timezone.now().isoformat(),
        },
        **extra,
    )


def test_two_events_in_an_hour_make_one_mail_with_both():
    member = MemberFactory()
    incident(member, 1)
    incident(member, 2)
    now = timezone.now()
    assert notices_mail_flush(now=now) == 1
    assert len(mail.outbox) == 1
    body = mail.outbox[0].body
    assert "Outage 1" in body
    assert "Outage 2" in body
    assert mail.outbox[0].to == [member.user.email]
    assert "2 notices" in mail.outbox[0].subject
    assert set(Notice.objects.values_list("mail_status", flat=True)) == {MailStatus.SENT}

    # A third within the hour waits; a notice of another kind has its own allowance.
    incident(member, 3)
    notice_create(member=member, kind=NoticeKind.TEST_ACCESS, params={"until": "2026-12-24"})
    assert notices_mail_flush(now=now + dt.timedelta(minutes=30)) == 1
    assert "test access" in mail.outbox[-1].subject.lower()
    waiting = Notice.objects.get(params__title="Outage 3")
    assert waiting.mail_status == MailStatus.PENDING
    assert waiting.pk in Notice.objects.filter(member=member).values_list("pk", flat=True)
    # After the hour it goes out, alone.
    assert notices_mail_flush(now=now + dt.timedelta(minutes=61)) == 1
    assert "Outage 3" in mail.outbox[-1].body
    assert "Outage 1" not in mail.outbox[-1].body
    assert len(mail.outbox) == 3
    assert notices_mail_flush(now=now + dt.timedelta(minutes=200)) == 0


def test_members_are_mailed_separately():
    first, second = MemberFactory(), MemberFactory()
    incident(first, 1)
    incident(second, 1)
    assert notices_mail_flush() == 2
    assert sorted(m.to[0] for m in mail.outbox) == sorted([first.user.email, second.user.email])


def test_a_german_member_gets_german_an_english_one_english_and_the_undecided_both():
    german, english, undecided = MemberFactory(), MemberFactory(), MemberFactory()
    preference_update(member=german, language="de", mail={}, actor=german.user)
    preference_update(member=english, language="en", mail={}, actor=english.user)
    for member in (german, english, undecided):
        notice_create(member=member, kind=NoticeKind.TEST_ACCESS, params={"until": "2026-12-24"})
    assert notices_mail_flush() == 3
    by_address = {m.to[0]: m for m in mail.outbox}

    to_german = by_address[german.user.email]
    assert to_german.subject == "Ihr Testzugang endet am 24. Dezember 2026"
    assert "Sprechstunde" in to_german.body
    assert "office hours" not in to_german.body
    assert "Hello" not in to_german.body

    to_english = by_address[english.user.email]
    assert to_english.subject == "Your test access ends on Dec. 24, 2026"
    assert "Testzugang" not in to_english.body

    to_undecided = by_address[undecided.user.email]
    assert "Your test access" in to_undecided.subject
    assert "Ihr Testzugang" in to_undecided.subject
    assert "office hours" in to_undecided.body
    assert "Sprechstunde" in to_undecided.body


def test_mail_turned_off_still_makes_the_notice_but_no_mail():
    member = MemberFactory()
    preference_update(
        member=member, language="", mail={NoticeKind.INCIDENT: False}, actor=member.user
    )
    notice = incident(member, 1)
    notice_create(member=member, kind=NoticeKind.TRAFFIC, params={"month": "2026-10"})
    assert notices_mail_flush() == 0
    assert mail.outbox == []
    notice.refresh_from_db()
    assert notice.mail_status == MailStatus.OFF
    # The monthly summary is off unless chosen.
    assert Notice.objects.get(kind=NoticeKind.TRAFFIC).mail_status == MailStatus.OFF
    assert Notice.objects.filter(member=member).count() == 2


def test_a_member_without_address_gets_the_notice_only():
    member = MemberFactory(user__email="")
    notice = incident(member, 1)
    assert notices_mail_flush() == 0
    notice.refresh_from_db()
    assert notice.mail_status == MailStatus.NO_ADDRESS


def test_the_same_source_makes_one_notice():
    member = MemberFactory()
    assert incident(member, 1, source="incident:7") is not None
    assert incident(member, 1, source="incident:7") is None
    assert Notice.objects.filter(member=member).count() == 1


def test_a_second_flush_while_one_runs_sends_nothing(django_capture_on_commit_callbacks):
    from apps.notifications.services import _flush_lock

    member = MemberFactory()
    incident(member, 1)
    with _flush_lock() as held:
        assert held
        assert notices_mail_flush() == 0
    assert notices_mail_flush() == 1


def test_a_failing_mail_server_keeps_what_was_sent(monkeypatch):
    first, second = MemberFactory(), MemberFactory()
    incident(first, 1)
    incident(second, 1)
    sent = []

    def flaky(self, messages):
        if sent:
            raise ConnectionError("server went away")
        sent.extend(messages)
        return len(messages)

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", flaky)
    with pytest.raises(OSError, match="server went away"):
        notices_mail_flush()
    assert Notice.objects.filter(mail_status=MailStatus.SENT).count() == 1
    assert Notice.objects.filter(mail_status=MailStatus.PENDING).count() == 1
    monkeypatch.undo()
    assert notices_mail_flush() == 1
    assert Notice.objects.filter(mail_status=MailStatus.PENDING).count() == 0
