"""Mail received in batches (the listener during a burst): every mail is filed as it would be
alone: threads, duplicates, quarantine, incident links, verified senders; one mail that cannot
be stored fails alone."""

from __future__ import annotations

import smtplib
from concurrent.futures import ThreadPoolExecutor
from email.policy import SMTP as SMTP_POLICY

import pytest

from apps.tickets import services
from apps.tickets.choices import InboundStatus, MessageKind
from apps.tickets.models import InboundMail, Message, Ticket
from apps.tickets.services import ReceivedMail, incident_declare, mail_receive_batch
from tests.factories import MemberFactory, UserFactory
from tests.integration.tickets.conftest import make_mail

BROKEN = (
    b"From: broken@example.org\r\nTo: support@localhost\r\nSubject: broken\r\n"
    b"Message-ID: <broken-1@example.org>\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="abc"\r\n\r\n'
    b"--xyz\r\nContent-Type: text/plain\r\n\r\nlost boundary\r\n"
)


def received(mail, sender="sender@example.org") -> ReceivedMail:
    raw = mail if isinstance(mail, bytes) else mail.as_bytes(policy=SMTP_POLICY)
    return ReceivedMail(raw=raw, envelope_from=sender, envelope_to=["support@localhost"])


@pytest.mark.django_db
def test_a_batch_files_every_mail_as_it_would_be_filed_alone(settings):
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = ["mx.dorm.example"]
    member = MemberFactory(user__email="Vera@Example.org")
    incident = incident_declare(
        actor=None, title="Switch down", buildings=[member.room.building], keywords=["xyzzy"]
    )
    earlier = mail_receive_batch([received(make_mail(subject="First", sender="a@example.org"))])
    first_message = earlier[0].message
    reply = make_mail(subject="Re: First", sender="a@example.org")
    reply["In-Reply-To"] = first_message.message_id
    twice = make_mail(subject="Sent twice", sender="b@example.org")
    verified = make_mail(
        subject="No network",
        sender="vera@example.org",
        Authentication_Results="mx.dorm.example; dmarc=pass header.from=example.org",
    )

    outcomes = mail_receive_batch(
        [
            received(reply),
            received(twice),
            received(BROKEN),
            received(twice),  # the same Message-ID again within the batch
            received(verified),
            received(make_mail(subject="xyzzy again", sender="c@example.org")),
        ]
    )

    assert [o.status for o in outcomes] == [
        InboundStatus.PROCESSED,
        InboundStatus.PROCESSED,
        InboundStatus.QUARANTINED,
        InboundStatus.DUPLICATE,
        InboundStatus.PROCESSED,
        InboundStatus.PROCESSED,
    ]
    assert outcomes[0].message.ticket == first_message.ticket  # threaded, no new ticket
    assert outcomes[3].message == outcomes[1].message
    assert Ticket.objects.filter(subject="Sent twice").count() == 1
    vera = outcomes[4].message.ticket
    assert vera.requester == member.user
    assert vera.incident == incident  # her building is affected
    assert outcomes[5].message.ticket.incident == incident  # keyword
    assert Ticket.objects.filter(subject="First").get().incident is None
    assert InboundMail.objects.count() == 7  # every mail stored, the broken one too


@pytest.mark.django_db
def test_a_mail_that_cannot_be_stored_fails_alone(settings, monkeypatch):
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    real = services.mail_receive

    def failing_for_one(**kwargs):
        if b"Subject: cannot" in kwargs["raw"]:
            raise RuntimeError("disk full")
        return real(**kwargs)

    monkeypatch.setattr(services.inbound, "mail_receive", failing_for_one)  # the batch's call
    outcomes = mail_receive_batch(
        [
            received(make_mail(subject="before", sender="a@example.org")),
            received(make_mail(subject="cannot", sender="b@example.org")),
            received(make_mail(subject="after", sender="c@example.org")),
        ]
    )
    assert isinstance(outcomes[1], RuntimeError)
    assert sorted(Ticket.objects.values_list("subject", flat=True)) == ["after", "before"]


def test_a_burst_over_smtp_loses_nothing_and_threads_replies(listener, settings):
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    UserFactory(username="dup1", email="shared@example.org")
    UserFactory(username="dup2", email="Shared@example.org")  # two logins: nobody's ticket
    listener.send(make_mail(subject="Original", sender="orig@example.org"))
    original = Message.objects.get(kind=MessageKind.INBOUND)
    mails = [make_mail(subject=f"Burst {n}", sender=f"r{n}@example.org") for n in range(40)]
    reply = make_mail(subject="Re: Original", sender="orig@example.org")
    reply["In-Reply-To"] = original.message_id
    mails += [reply, make_mail(subject="Shared", sender="shared@example.org")]
    mails.append(mails[0])  # a retry of a mail already sent

    def send(chunk):
        with smtplib.SMTP("127.0.0.1", listener.port, timeout=30) as smtp:
            for mail in chunk:
                smtp.sendmail(
                    "x@example.org", ["support@localhost"], mail.as_bytes(policy=SMTP_POLICY)
                )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, [mails[i::8] for i in range(8)]))

    assert InboundMail.objects.count() == len(mails) + 1
    assert Ticket.objects.filter(subject__startswith="Burst").count() == 40
    assert original.ticket.messages.filter(kind=MessageKind.INBOUND).count() == 2
    assert InboundMail.objects.filter(status=InboundStatus.DUPLICATE).count() == 1
    assert Ticket.objects.get(subject="Shared").requester is None
