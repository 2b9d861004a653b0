"""Run the SMTP listener that turns incoming mail into tickets."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Listen for mail on PORTAL_SMTP_HOST:PORTAL_SMTP_PORT and file it as tickets."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.PORTAL_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.PORTAL_SMTP_PORT)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        from workers.mail import smtp_controller

        controller = smtp_controller(host, port)
        controller.start()
        self.stdout.write(f"Listening for ticket mail on {host}:{port}")
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            stop.wait()
        finally:
            controller.stop()
