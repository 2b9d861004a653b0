"""Real SMTP both ways: the ticket listener and a sink for outbound mail, in the test process."""

from __future__ import annotations

import smtplib
import socket
import threading
import time
from contextlib import contextmanager
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.policy import SMTP

import pytest
from aiosmtpd.controller import Controller
from django.core.cache import cache

from apps.infra.celery import app as celery_app
from apps.tickets.mailin import smtp_controller
from apps.tickets.status import STALE_KEY, status_cache_clear


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SinkHandler:
    """Collects every mail it receives."""

    def __init__(self) -> None:
        self.mails: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(
            envelope.original_content or envelope.content, policy=policy.default
        )
        with self.lock:
            self.mails.append(msg)
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[EmailMessage]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.mails) >= count:
                    return list(self.mails)
            time.sleep(0.02)
        return list(self.mails)


@pytest.fixture(autouse=True)
def _fresh_status_cache():
    """The status cache lives in Redis across tests; start and end each test without it."""
    cache.delete(STALE_KEY)
    status_cache_clear()
    yield
    cache.delete(STALE_KEY)
    status_cache_clear()


@contextmanager
def eager_tasks():
    """Tasks run in the caller (after commit), as a worker would run them."""
    old = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = old


@contextmanager
def started(controller: Controller):
    """`controller` serving; stopped afterwards, also when starting it failed (a busy machine
    can miss `ready_timeout`): its thread would otherwise serve and log until the end."""
    try:
        controller.start()
        yield controller
    finally:
        controller.stop(no_assert=True)


@contextmanager
def running_sink(settings):
    """An SMTP server on 127.0.0.1 that receives the portal's outbound mail."""
    handler = SinkHandler()
    port = free_port()
    with started(Controller(handler, hostname="127.0.0.1", port=port, ready_timeout=5)):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_USE_TLS, settings.EMAIL_HOST_USER = False, ""
        settings.EMAIL_HOST_PASSWORD, settings.EMAIL_TIMEOUT = "", 5
        yield handler


@pytest.fixture
def smtp_sink(settings):
    """Outbound mail goes to a real SMTP sink; Celery tasks run eagerly."""
    with eager_tasks(), running_sink(settings) as handler:
        yield handler


@pytest.fixture
def listener(smtp_sink, transactional_db):
    """The ticket listener on a free port; `send(bytes_or_message, mail_from=...)` delivers."""
    port = free_port()

    class Sender:
        def __init__(self) -> None:
            self.port = port

        def send(
            self,
            mail: bytes | EmailMessage,
            mail_from: str | None = None,
            to: str = "support@localhost",
        ) -> None:
            raw = mail.as_bytes(policy=SMTP) if isinstance(mail, EmailMessage) else mail
            if mail_from is None:
                mail_from = "sender@example.org"
                if isinstance(mail, EmailMessage) and mail["From"]:
                    mail_from = mail["From"].addresses[0].addr_spec
            with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
                smtp.sendmail(mail_from, [to], raw)

    with started(smtp_controller("127.0.0.1", port, close_connections=True)):
        yield Sender()


def make_mail(
    subject="Internet down",
    body="My internet is down since this morning.",
    sender="Alex Doe <alex@example.org>",
    **headers,
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "support@localhost"
    msg["Subject"] = subject
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    if "Message-ID" not in msg:
        from email.utils import make_msgid

        msg["Message-ID"] = make_msgid(domain="example.org")
    msg.set_content(body)
    return msg
