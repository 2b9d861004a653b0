"""Run the SMTP listener that turns incoming mail into tickets."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.tickets.mailin import smtp_controller


class Command(BaseCommand):
    help = "Listen for mail on PORTAL_SMTP_HOST:PORTAL_SMTP_PORT and file it as tickets."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.PORTAL_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.PORTAL_SMTP_PORT)
        parser.add_argument(
            "--batch", type=int, default=50, help="at most this many mails per transaction"
        )
        parser.add_argument(
            "--threads", type=int, default=2, help="threads storing mail (database connections)"
        )

    def handle(
        self, *args: Any, host: str, port: int, batch: int, threads: int, **options: Any
    ) -> None:
        if batch < 1 or threads < 1:
            raise CommandError("--batch and --threads must be at least 1")
        controller = smtp_controller(host, port, max_batch=batch, threads=threads)
        controller.start()
        self.stdout.write(f"Listening for ticket mail on {host}:{port}")
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            stop.wait()
        finally:
            controller.stop()
