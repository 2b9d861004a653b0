"""Real mails over SMTP into the listener; the result checked in PostgreSQL."""

from __future__ import annotations

import logging
import smtplib
import threading
from email.policy import SMTP as SMTP_POLICY

import pytest

from apps.tickets.choices import InboundStatus, MessageKind, TicketStatus
from apps.tickets.models import InboundMail, Message, Ticket
from apps.tickets.services import ticket_reply
from tests.factories import UserFactory
from tests.integration.tickets.conftest import make_mail


def test_plain_mail_becomes_ticket_matched_to_member_and_acknowledged(
    listener, smtp_sink, settings
):
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = ["mx.dorm.example"]
    member = UserFactory(username="alex", email="Alex@Example.org", roles=["member"])
    listener.send(
        make_mail(Authentication_Results="mx.dorm.example; dmarc=pass header.from=example.org")
    )

    ticket = Ticket.objects.get()
    assert ticket.requester == member  # matched case-insensitively
    assert ticket.requester_email == "alex@example.org"
    assert ticket.subject == "Internet down"
    assert ticket.status == TicketStatus.NEW
    message = ticket.messages.get(kind=MessageKind.INBOUND)
    assert "down since this morning" in message.body_text
    assert InboundMail.objects.get().status == InboundStatus.PROCESSED

    (ack,) = smtp_sink.wait_for(1)
    assert ack["To"] == "alex@example.org"
    assert ticket.subject_tag in ack["Subject"]
    assert ack["Auto-Submitted"] == "auto-replied"
    assert ack["In-Reply-To"] == message.message_id
    assert ticket.first_response_at is None  # an acknowledgement is no response


def test_unknown_sender_keeps_bare_address(listener):
    listener.send(make_mail(sender="nobody@elsewhere.example"))
    ticket = Ticket.objects.get()
    assert ticket.requester is None
    assert ticket.requester_email == "nobody@elsewhere.example"


def test_multipart_alternative_and_html_only(listener):
    msg = make_mail(subject="Both", body="plain version")
    msg.add_alternative("<html><body><p>html <b>version</b></p></body></html>", subtype="html")
    listener.send(msg)
    html_only = make_mail(subject="Html only", sender="h@example.org")
    html_only.set_content(
        "<html><head><style>p{}</style></head><body><p>Hello&nbsp;there</p>"
        "<script>alert(1)</script><div>second line</div></body></html>",
        subtype="html",
    )
    listener.send(html_only)

    both = Message.objects.get(ticket__subject="Both", kind=MessageKind.INBOUND)
    assert both.body_text.strip() == "plain version"
    assert "<b>version</b>" in both.body_html
    html = Message.objects.get(ticket__subject="Html only", kind=MessageKind.INBOUND)
    assert "Hello" in html.body_text
    assert "second line" in html.body_text
    assert "alert" not in html.body_text
    assert "<p>" not in html.body_text


def test_attachments_stored_up_to_the_limit(listener, settings):
    settings.PORTAL_TICKET_ATTACHMENT_MAX_BYTES = 1000
    msg = make_mail(subject="Screenshot")
    msg.add_attachment(b"\x89PNG small", maintype="image", subtype="png", filename="small.png")
    msg.add_attachment(
        b"x" * 5000, maintype="application", subtype="octet-stream", filename="big.bin"
    )
    listener.send(msg)

    message = Message.objects.get(kind=MessageKind.INBOUND)
    small, big = message.attachments.order_by("filename").reverse()
    assert (small.filename, small.content_type, bytes(small.data)) == (
        "small.png",
        "image/png",
        b"\x89PNG small",
    )
    assert small.stored
    assert big.filename == "big.bin"
    assert big.size == 5000
    assert not big.stored
    assert bytes(big.data) == b""
    assert "down since" in message.body_text


def test_mail_over_the_size_limit_is_refused_by_smtp(listener, settings):
    from apps.tickets.mailin import smtp_controller
    from tests.integration.tickets.conftest import free_port, started

    settings.PORTAL_MAIL_MAX_BYTES = 4000
    port = free_port()
    with (
        started(smtp_controller("127.0.0.1", port, close_connections=True)),
        smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp,
        pytest.raises((smtplib.SMTPSenderRefused, smtplib.SMTPDataError)) as info,
    ):
        smtp.sendmail(
            "a@example.org",
            ["support@localhost"],
            make_mail(body=("y" * 70 + "\n") * 150).as_bytes(policy=SMTP_POLICY),
        )
    assert info.value.smtp_code == 552  # the sender keeps it and tells the person
    assert not Ticket.objects.exists()


def test_broken_mime_is_quarantined_and_the_ingester_goes_on(listener, smtp_sink):
    broken = (
        b"From: broken@example.org\r\nTo: support@localhost\r\nSubject: broken\r\n"
        b"Message-ID: <broken-1@example.org>\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="abc"\r\n\r\n'
        b"--xyz\r\nContent-Type: text/plain\r\n\r\nlost boundary\r\n"
    )
    listener.send(broken, mail_from="broken@example.org")
    no_sender = b"Subject: who am I\r\nFrom: \r\n\r\nno sender at all\r\n"
    listener.send(no_sender, mail_from="")
    listener.send(make_mail(subject="after the broken ones", sender="ok@example.org"))

    quarantined = InboundMail.objects.filter(status=InboundStatus.QUARANTINED)
    assert quarantined.count() == 2
    assert all(q.error for q in quarantined)
    assert b"lost boundary" in bytes(quarantined.get(error__contains="MIME").raw)
    assert Ticket.objects.get().subject == "after the broken ones"
    # nothing dropped: every received mail is accounted for
    assert InboundMail.objects.count() == 3
    assert len(smtp_sink.wait_for(1)) == 1  # no acknowledgement to the broken ones


@pytest.mark.parametrize(
    ("headers", "mail_from"),
    [
        ({"Auto_Submitted": "auto-replied"}, None),
        ({"Precedence": "bulk"}, None),
        ({"X_Autoreply": "yes"}, None),
        ({}, ""),  # null sender: a bounce
    ],
    ids=["auto-submitted", "precedence", "x-autoreply", "null-sender"],
)
def test_automatic_mail_is_filed_but_never_answered(listener, smtp_sink, headers, mail_from):
    listener.send(make_mail(subject="Out of office", **headers), mail_from=mail_from)
    ticket = Ticket.objects.get()
    message = ticket.messages.get()
    assert message.is_automatic
    assert message.automatic_reason
    assert "automatic" in ticket.tags
    assert smtp_sink.wait_for(1, timeout=0.5) == []
    assert not Message.objects.filter(kind=MessageKind.OUTBOUND).exists()


def test_delivery_report_bounce_is_not_answered(listener, smtp_sink):
    bounce = (
        b"From: Mail Delivery System <MAILER-DAEMON@example.org>\r\nTo: support@localhost\r\n"
        b"Subject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=delivery-status; boundary="b1"\r\n\r\n'
        b"--b1\r\nContent-Type: text/plain\r\n\r\nThe mail could not be delivered.\r\n"
        b"--b1\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; x\r\n\r\n"
        b"Final-Recipient: rfc822; gone@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        b"--b1--\r\n"
    )
    listener.send(bounce, mail_from="")
    message = Message.objects.get()
    assert message.is_automatic
    assert smtp_sink.wait_for(1, timeout=0.5) == []


def test_auto_reply_loop_is_broken_by_the_rate_limit(listener, smtp_sink, settings):
    """An auto-responder that does not mark itself: we acknowledge a few times, then stop."""
    settings.PORTAL_TICKET_ACK_PER_HOUR = 2
    for n in range(4):
        listener.send(
            make_mail(subject=f"Re: We have received your request {n}", sender="robot@example.org")
        )
    assert Ticket.objects.count() == 4
    assert len(smtp_sink.wait_for(2)) == 2
    assert len(smtp_sink.wait_for(3, timeout=0.5)) == 2


def test_reply_threads_by_in_reply_to_and_references(listener, smtp_sink):
    staff = UserFactory(username="sam", roles=["support"])
    first = make_mail()
    listener.send(first)
    ticket = Ticket.objects.get()
    ticket_reply(ticket=ticket, actor=staff, body="Please restart your router, {first_name}.")
    mails = smtp_sink.wait_for(2)
    reply = mails[-1]
    assert reply["In-Reply-To"] == first["Message-ID"]
    assert first["Message-ID"] in reply["References"]
    assert reply["Subject"] == f"Re: Internet down [#{ticket.pk}:{ticket.reply_token}]"

    answer = make_mail(subject="Re: something else entirely", body="Did that, still down.")
    answer["In-Reply-To"] = reply["Message-ID"]
    answer["References"] = f"{first['Message-ID']} {reply['Message-ID']}"
    listener.send(answer)

    assert Ticket.objects.count() == 1
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.OPEN  # reopened from "waiting for member"
    assert ticket.messages.filter(kind=MessageKind.INBOUND).count() == 2
    assert len(smtp_sink.wait_for(3, timeout=0.5)) == 2  # no acknowledgement for a reply


def test_reply_threads_by_the_ticket_token_not_by_the_bare_number(listener):
    listener.send(make_mail(sender="alex@example.org"))
    ticket = Ticket.objects.get()
    listener.send(
        make_mail(
            subject=f"Re: {ticket.subject_tag} forgot something",
            sender="ALEX@example.org",
            body="also the wifi",
        )
    )
    assert Ticket.objects.count() == 1
    assert ticket.messages.filter(kind=MessageKind.INBOUND).count() == 2
    # the number alone is guessable and From is forgeable: a new ticket, not this one
    listener.send(make_mail(subject=f"Re: [#{ticket.pk}] more", sender="alex@example.org"))
    listener.send(make_mail(subject=f"[#{ticket.pk}] hijack", sender="mallory@example.org"))
    assert Ticket.objects.count() == 3
    assert ticket.messages.filter(kind=MessageKind.INBOUND).count() == 2


def test_same_message_id_twice_is_recorded_as_duplicate(listener):
    mail = make_mail()
    listener.send(mail)
    listener.send(mail)
    assert Ticket.objects.count() == 1
    assert sorted(InboundMail.objects.values_list("status", flat=True)) == [
        InboundStatus.DUPLICATE,
        InboundStatus.PROCESSED,
    ]


def test_unknown_charsets_in_body_and_headers(listener):
    raw = (
        b"From: =?x-unknown?q?J=FCrgen?= <juergen@example.org>\r\nTo: support@localhost\r\n"
        b"Subject: =?x-weird?q?Gr=FC=DFe?= aus Haus B\r\nMessage-ID: <cs-1@example.org>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=x-klingon\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\nKein Netz seit gestern, Gr\xfc\xdfe\r\n"
    )
    listener.send(raw, mail_from="juergen@example.org")
    ticket = Ticket.objects.get()
    message = ticket.messages.get(kind=MessageKind.INBOUND)
    assert "Haus B" in ticket.subject
    assert message.body_text.startswith("Kein Netz seit gestern, Gr")
    assert "Grüße" in message.body_text  # undeclared bytes fall back to cp1252
    assert message.from_email == "juergen@example.org"


def test_listener_refuses_with_451_when_the_mail_cannot_be_stored(listener, monkeypatch):
    from apps.tickets import services

    def fail(**kwargs):
        raise RuntimeError("database gone")

    monkeypatch.setattr(services.inbound, "mail_receive", fail)  # what the listener's batch calls
    with (
        smtplib.SMTP("127.0.0.1", listener.port, timeout=10) as smtp,
        pytest.raises(smtplib.SMTPDataError) as info,
    ):
        smtp.sendmail("a@example.org", ["support@localhost"], make_mail().as_bytes())
    assert info.value.smtp_code == 451


def test_the_listener_logs_no_connection_chatter_and_leaves_no_server_thread(transactional_db):
    """aiosmtpd logged each connection's steps at INFO from its own thread, whenever it got to
    them: in tests after pytest had closed the capture of the test that caused them ("I/O
    operation on closed file"), in production six lines per mail."""
    from apps.tickets.mailin import smtp_controller
    from tests.integration.tickets.conftest import free_port, started

    records: list[logging.LogRecord] = []
    keep = logging.Handler()
    keep.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(keep)
    before = set(threading.enumerate())
    port = free_port()
    try:
        with (
            started(smtp_controller("127.0.0.1", port, close_connections=True)),
            smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp,
        ):
            smtp.sendmail("a@example.org", ["support@localhost"], make_mail().as_bytes())
    finally:
        logging.getLogger().removeHandler(keep)
    assert [r.getMessage() for r in records if r.name == "mail.log"] == []
    assert Ticket.objects.count() == 1
    servers = [t for t in threading.enumerate() if t not in before and t.name != "mail-store"]
    assert servers == []
