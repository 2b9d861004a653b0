"""Mail in for tickets: the SMTP listener (aiosmtpd, `manage.py mail_listen`) and IMAP polling
(the beat task workers.mail.imap_poll).

The listener answers 250 only after the raw mail is stored in PostgreSQL; if storing fails it
answers 451 so the sending MTA retries. Parsing problems never fail the delivery: the mail is
quarantined and shown to staff.
"""

from __future__ import annotations

import asyncio
import imaplib
import logging
import queue
import threading
from typing import Any

from aiosmtpd.controller import Controller
from django.conf import settings
from django.db import close_old_connections, connection

from apps.tickets import services

log = logging.getLogger(__name__)


class TicketMailHandler:
    """aiosmtpd handler: every accepted mail becomes an InboundMail row, then a ticket message.

    Mails are stored by one thread in batches (_MailStore): during an outage burst the mails
    that arrived while the previous batch was being stored commit together, so 250 still comes
    only after the commit, at a fraction of the cost per mail. `close_connections` closes that
    thread's database connection after every batch (tests, which drop their database
    afterwards); the listener process keeps it (CONN_MAX_AGE).
    """

    def __init__(
        self, *, close_connections: bool = False, max_batch: int = 50, threads: int = 2
    ) -> None:
        self.close_connections = close_connections
        self.store = _MailStore(
            close_connections=close_connections, max_batch=max_batch, threads=threads
        )

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        try:
            await self.store.store(raw, envelope.mail_from, list(envelope.rcpt_tos))
        except Exception:
            log.exception("could not store an incoming mail; asking the sender to retry")
            return "451 4.3.0 Temporary failure, please retry"
        return "250 2.0.0 Message accepted"


class _MailStore:
    """Threads that store received mail: each takes every mail waiting (up to `max_batch`) and
    hands them to mail_receive_batch(), one transaction, then answers each waiting SMTP session
    with its own outcome. A single mail waits for nothing: it is a batch of one. Two threads
    keep one batch's database round trips overlapping with the next batch's parsing."""

    def __init__(self, *, close_connections: bool, max_batch: int, threads: int) -> None:
        self.close_connections = close_connections
        self.max_batch = max_batch
        self.size = threads
        self.waiting: queue.SimpleQueue[tuple[Any, asyncio.AbstractEventLoop, asyncio.Future[None]]]
        self.waiting = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    async def store(self, raw: bytes, mail_from: str | None, rcpt_tos: list[str]) -> None:
        """Store one mail; returns once it is committed, raises when it could not be stored."""

        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.waiting.put((services.ReceivedMail(raw, mail_from, rcpt_tos), loop, done))
        with self.lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            while len(self.threads) < self.size:
                thread = threading.Thread(target=self._run, name="mail-store", daemon=True)
                thread.start()
                self.threads.append(thread)
        await done

    def _run(self) -> None:
        while True:
            batch = [self.waiting.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.waiting.get_nowait())
                except queue.Empty:
                    break
            outcomes = _receive_batch(
                [mail for mail, _loop, _done in batch], self.close_connections
            )
            for (_mail, loop, done), outcome in zip(batch, outcomes, strict=True):
                loop.call_soon_threadsafe(_settle, done, outcome)


def _settle(done: asyncio.Future[None], outcome: object) -> None:
    if done.cancelled():
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(None)


def _receive_batch(mails: list[Any], close: bool) -> list[object]:
    """mail_receive_batch() with Django's connection handling around it, as around a request;
    a failed commit is every mail's outcome."""
    close_old_connections()  # drop broken or expired connections
    try:
        return list(services.mail_receive_batch(mails))
    except Exception as exc:
        log.exception("a batch of %d incoming mail(s) could not be committed", len(mails))
        return [exc] * len(mails)
    finally:
        if close:
            connection.close()
        else:
            close_old_connections()


def smtp_controller(
    host: str | None = None,
    port: int | None = None,
    *,
    close_connections: bool = False,
    max_batch: int = 50,
    threads: int = 2,
) -> Any:
    """An aiosmtpd Controller for the ticket handler (not started)."""
    return Controller(
        TicketMailHandler(
            close_connections=close_connections, max_batch=max_batch, threads=threads
        ),
        hostname=host or settings.PORTAL_SMTP_HOST,
        port=port if port is not None else settings.PORTAL_SMTP_PORT,
        data_size_limit=settings.PORTAL_MAIL_MAX_BYTES,
        decode_data=False,
        ready_timeout=10,
    )


def imap_poll() -> int:
    """Fetch unseen mail from the IMAP mailbox (production alternative to the SMTP listener).

    A mail is flagged \\Seen (and moved to PORTAL_IMAP_DONE_MAILBOX when that is set) only after
    it is stored, so a crash fetches it again (the Message-ID check then records it as a
    duplicate instead of a second ticket). A mail that cannot be stored stays unseen for the next
    poll and does not stop the others; broken MIME is stored and quarantined like SMTP mail.
    """
    if not settings.PORTAL_IMAP_HOST:
        return 0
    cls = imaplib.IMAP4_SSL if settings.PORTAL_IMAP_SSL else imaplib.IMAP4
    with cls(settings.PORTAL_IMAP_HOST, settings.PORTAL_IMAP_PORT, timeout=30) as imap:
        imap.login(settings.PORTAL_IMAP_USER, settings.PORTAL_IMAP_PASSWORD)
        return _imap_fetch_all(
            imap,
            mailbox=settings.PORTAL_IMAP_MAILBOX,
            done_mailbox=getattr(settings, "PORTAL_IMAP_DONE_MAILBOX", ""),
        )


def _imap_fetch_all(imap: imaplib.IMAP4, *, mailbox: str, done_mailbox: str) -> int:
    typ, _data = imap.select(mailbox)
    if typ != "OK":
        raise imaplib.IMAP4.error(f"cannot select mailbox {mailbox!r}")
    if done_mailbox:
        imap.create(done_mailbox)  # NO when it exists already, which is fine
    _typ, data = imap.uid("search", None, "UNSEEN")
    count = 0
    for uid in (data[0] or b"").split()[:500]:
        try:
            _typ, fetched = imap.uid("fetch", uid, "(BODY.PEEK[])")
            raw = next((part[1] for part in fetched if isinstance(part, tuple)), None)
            if raw is None:
                continue
            services.mail_receive(raw=raw, envelope_from=None, source="imap")
        except imaplib.IMAP4.abort:
            raise  # the connection is gone: the next poll starts over
        except Exception:
            log.exception("IMAP mail %s could not be stored; it stays unseen", uid.decode())
            continue
        # Committed: only now may the server forget that we still need it.
        imap.uid("store", uid, "+FLAGS", "(\\Seen)")
        if done_mailbox:
            typ, _data = imap.uid("MOVE", uid, done_mailbox)
            if typ != "OK":  # servers without MOVE (RFC 6851)
                imap.uid("copy", uid, done_mailbox)
                imap.uid("store", uid, "+FLAGS", "(\\Deleted)")
                imap.expunge()
        count += 1
    return count
