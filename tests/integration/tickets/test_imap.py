"""IMAP polling against a real Dovecot: APPENDed mail becomes tickets, exactly once."""

from __future__ import annotations

import pytest

from apps.tickets.choices import InboundStatus
from apps.tickets.models import InboundMail, Ticket
from tests.integration.tickets.conftest import make_mail
from tests.integration.tickets.dovecot import dovecot_server
from workers.mail import imap_poll

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def dovecot():
    with dovecot_server() as server:
        yield server


@pytest.fixture
def imap(dovecot, settings):
    """The portal polls the test server; its mailbox starts empty for every test."""
    with dovecot.client() as client:
        for box in ("INBOX", "Processed"):
            typ, count = client.select(box)
            if typ == "OK" and int(count[0]) > 0:
                client.store("1:*", "+FLAGS", "(\\Deleted)")
                client.expunge()
    settings.PORTAL_IMAP_HOST = dovecot.host
    settings.PORTAL_IMAP_PORT = dovecot.port
    settings.PORTAL_IMAP_SSL = False
    settings.PORTAL_IMAP_USER = dovecot.user
    settings.PORTAL_IMAP_PASSWORD = dovecot.password
    settings.PORTAL_IMAP_MAILBOX = "INBOX"
    settings.PORTAL_IMAP_DONE_MAILBOX = ""
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    return dovecot


def _raw(**kwargs) -> bytes:
    return make_mail(**kwargs).as_bytes()


def test_appended_mail_becomes_a_ticket_once(imap):
    imap.append(_raw(subject="No internet in C-12", sender="Kim <kim@example.org>"))
    assert imap_poll() == 1
    ticket = Ticket.objects.get()
    assert ticket.subject == "No internet in C-12"
    assert ticket.requester_email == "kim@example.org"
    assert InboundMail.objects.get().source == "imap"
    assert "\\Seen" in imap.flags()[0]
    # A second poll finds nothing new.
    assert imap_poll() == 0
    assert Ticket.objects.count() == 1


def test_mail_is_marked_read_only_after_it_is_stored(imap, monkeypatch):
    import apps.tickets.services as services

    real = services.mail_receive
    seen_while_storing = []

    def failing(**kwargs):
        raise RuntimeError("database unavailable")

    imap.append(_raw(subject="First try fails", sender="a@example.org"))
    monkeypatch.setattr(services, "mail_receive", failing)
    assert imap_poll() == 0  # not stored ...
    assert "\\Seen" not in imap.flags()[0]  # ... so still unseen on the server
    assert not InboundMail.objects.exists()

    def storing(**kwargs):
        inbound = real(**kwargs)
        seen_while_storing.append("\\Seen" in imap.flags()[0])
        return inbound

    monkeypatch.setattr(services, "mail_receive", storing)
    assert imap_poll() == 1  # the next poll takes it
    assert seen_while_storing == [False]
    assert "\\Seen" in imap.flags()[0]
    assert Ticket.objects.get().subject == "First try fails"


def test_a_crash_before_marking_read_does_not_duplicate(imap):
    imap.append(_raw(subject="Twice fetched", sender="b@example.org"))
    assert imap_poll() == 1
    with imap.client() as client:  # as if the poller died between storing and flagging
        client.select("INBOX")
        client.store("1", "-FLAGS", "(\\Seen)")
    assert imap_poll() == 1
    assert Ticket.objects.count() == 1
    statuses = sorted(InboundMail.objects.values_list("status", flat=True))
    assert statuses == sorted([InboundStatus.PROCESSED, InboundStatus.DUPLICATE])


def test_broken_mail_goes_to_quarantine_and_the_rest_goes_on(imap):
    broken = (
        b"From: broken@example.org\r\nTo: support@localhost\r\nSubject: broken\r\n"
        b"Message-ID: <imap-broken-1@example.org>\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="abc"\r\n\r\n'
        b"--xyz\r\nContent-Type: text/plain\r\n\r\nlost boundary\r\n"
    )
    imap.append(broken)
    imap.append(_raw(subject="Fine", sender="c@example.org"))
    assert imap_poll() == 2
    quarantined = InboundMail.objects.get(status=InboundStatus.QUARANTINED)
    assert b"lost boundary" in bytes(quarantined.raw)
    assert Ticket.objects.get().subject == "Fine"
    assert all("\\Seen" in flags for flags in imap.flags())


def test_fetched_mail_can_be_moved_to_a_done_mailbox(imap, settings):
    settings.PORTAL_IMAP_DONE_MAILBOX = "Processed"
    imap.append(_raw(subject="Move me", sender="d@example.org"))
    assert imap_poll() == 1
    assert imap.flags("INBOX") == []
    assert len(imap.flags("Processed")) == 1
    assert Ticket.objects.get().subject == "Move me"


def test_no_imap_host_means_no_polling(settings):
    settings.PORTAL_IMAP_HOST = ""
    assert imap_poll() == 0
