"""Ticket benchmarks, run by tests/bench/run.py in a subprocess against a scratch database.

Prints one JSON list of rows (name, value, unit, target) on the last line of stdout.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import smtplib
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import make_msgid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sink:
    """An SMTP sink that only counts."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.count += 1
        return "250 OK"

    def wait_for(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count >= n:
                return True
            time.sleep(0.01)
        return False


def mail(n: int) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Resident {n} <resident{n}@example.org>"
    msg["To"] = "support@localhost"
    msg["Subject"] = f"Internet offline in room {n}"
    msg["Message-ID"] = make_msgid(domain="bench.example.org")
    msg.set_content(f"Hello,\n\nmy internet has been offline since this morning (room {n}).\n")
    return msg.as_bytes(policy=SMTP)


def burst(port: int, total: int, clients: int) -> None:
    def one_client(numbers: list[int]) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
            for n in numbers:
                smtp.sendmail(f"resident{n}@example.org", ["support@localhost"], mail(n))

    chunks = [list(range(i, total, clients)) for i in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, chunks))


def main() -> None:
    import django

    django.setup()
    from aiosmtpd.controller import Controller
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.core.management import call_command

    from apps.infra.celery import app as celery_app
    from apps.tickets.models import Message, Ticket
    from apps.tickets.services import incident_declare, incident_mass_reply

    call_command("flush", "--no-input", verbosity=0)
    cache.clear()
    celery_app.conf.task_always_eager = True
    sink = Sink()
    sink_port = free_port()
    sink_controller = Controller(sink, hostname="127.0.0.1", port=sink_port)
    sink_controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sink_port
    rows = []

    # 1. 1,000 mails in a burst from 20 SMTP clients into the listener process.
    rows += mail_burst()

    # 2. One reply to 500 linked tickets, delivered to the sink.
    before = sink.count
    Ticket.objects.filter(
        pk__in=list(Ticket.objects.order_by("pk").values_list("pk", flat=True)[500:])
    ).update(status="solved")
    incident = incident_declare(
        actor=None,
        title="Uplink down",
        keywords=["offline"],
        started_at=Ticket.objects.order_by("created_at").first().created_at,
    )
    linked = incident.tickets.filter(status="new").count()
    staff = get_user_model().objects.create_user("bench-support", first_name="Bench")
    start = time.monotonic()
    incident_mass_reply(incident=incident, actor=staff, body="Hello {first_name}, fixed.")
    delivered = sink.wait_for(before + linked, 120)
    took = time.monotonic() - start
    sent = Message.objects.filter(broadcast__incident=incident, sent_at__isnull=False).count()
    rows.append(
        (
            f"mass reply to {linked} linked tickets, delivered to an SMTP sink",
            f"{took:.1f}",
            "s",
            "< 60 s",
        )
    )
    rows.append(
        (
            "... messages delivered",
            f"{sink.count - before}",
            "mails",
            f"{linked}" + ("" if delivered and sent == linked else " (MISSING)"),
        )
    )
    sink_controller.stop()

    # 3. The public status page under concurrent load (gunicorn, 4 workers, 16 clients).
    rows += status_page_load(started_at=incident.started_at)
    print(json.dumps(rows))  # noqa: T201


def mail_burst(total: int = 1000, clients: int = 20) -> list[tuple[str, str, str, str]]:
    """`total` mails in a burst from `clients` SMTP clients into the listener process (as `make
    run` starts it), then count what became tickets; twice, each time beside the listener
    storing one mail per transaction in 6 threads (`--batch 1 --threads 6`, as it did before
    batches: asyncio's default pool of 6 threads on 2 cores), so that the ratio is measured on
    the same loaded machine. Acknowledgements are Celery's job in production, so they are off."""
    from django.core.management import call_command

    runs: dict[str, list[float]] = {"default": [], "single": []}
    for _round in range(2):
        for how, options in (("single", ["--batch", "1", "--threads", "6"]), ("default", [])):
            call_command("flush", "--no-input", verbosity=0)
            runs[how].append(_mail_burst_once(total, clients, options))
    best = min(runs["default"])
    rows: list[tuple[str, str, str, str]] = [
        (
            f"{total:,} mails over SMTP in a burst ({clients} clients), all accepted and "
            f"ticketed, best of 2 (both: {', '.join(f'{t:.1f}' for t in runs['default'])} s)",
            f"{best:.1f}",
            "s",
            "< 10 s",
        ),
        ("... rate", f"{total / best:.0f}", "mails/s", ""),
        ("... tickets after each of the 4 bursts (none lost)", f"{total}", "tickets", f"{total}"),
        (
            "... beside it, one mail per transaction in 6 threads (--batch 1 --threads 6), "
            f"both runs: {', '.join(f'{t:.1f}' for t in runs['single'])} s",
            f"{min(runs['single']):.1f}",
            "s",
            "",
        ),
    ]
    return rows


def _mail_burst_once(total: int, clients: int, options: list[str]) -> float:
    """One burst into a fresh listener; seconds until every mail was accepted (250 comes only
    after the commit); fails when a mail was lost."""
    from apps.tickets.models import InboundMail, Ticket

    port = free_port()
    listener = subprocess.Popen(
        [sys.executable, "manage.py", "mail_listen", "--port", str(port), *options],
        cwd=ROOT,
        env=dict(os.environ, PORTAL_TICKET_ACKNOWLEDGE="0"),
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        start = time.monotonic()
        burst(port, total, clients)
        took = time.monotonic() - start
    finally:
        listener.terminate()
        listener.wait(10)
    tickets, stored = Ticket.objects.count(), InboundMail.objects.count()
    if stored != total or tickets != total:
        raise SystemExit(f"lost mail ({' '.join(options)}): {stored} stored, {tickets} tickets")
    return took


def mail_only() -> None:
    """Only the mail burst (`python -m tests.bench.tickets_bench --mail-only`)."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("flush", "--no-input", verbosity=0)
    print(json.dumps(mail_burst()))  # noqa: T201


def _status_client(url: str, requests: int = 150) -> list[float]:
    """One client: `requests` sequential GETs of `url`, latencies in ms."""
    mine = []
    for _i in range(requests):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our own server)
            response.read()
        mine.append((time.perf_counter() - t0) * 1000)
    return mine


def status_page_load(*, started_at: object) -> list[tuple[str, str, str, str]]:
    """The public status page under concurrent load: gunicorn, 4 workers, 8 and 16 clients."""
    from apps.tickets.models import Incident
    from apps.tickets.status import status_cache_clear

    rows: list[tuple[str, str, str, str]] = []
    for n in range(5):
        Incident.objects.create(title=f"Past incident {n}", ended_at=started_at)
    status_cache_clear()
    web_port = free_port()
    env = dict(
        os.environ,
        DEBUG="0",
        SECRET_KEY="bench-only-" + "x" * 50,
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="0",
        STATIC_ROOT=str(ROOT / "var" / "bench-static"),
    )
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi:application",
            "--bind",
            f"127.0.0.1:{web_port}",
            "--workers",
            "4",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        url = f"http://127.0.0.1:{web_port}/status/"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

        def load(clients: int, *, processes: bool = True) -> tuple[list[float], float]:
            """`clients` clients, 150 requests each, all at once: (sorted latencies, seconds).

            Clients are separate processes: 16 client threads in one Python process mostly
            measure the client's own GIL hand-offs (5 ms switch interval), not the server.
            """
            start = time.monotonic()
            if processes:
                context = multiprocessing.get_context("fork")
                with context.Pool(clients) as pool:
                    parts = pool.map(_status_client, [url] * clients)
            else:
                with ThreadPoolExecutor(clients) as pool:
                    parts = list(pool.map(_status_client, [url] * clients))
            took = time.monotonic() - start
            return sorted(x for part in parts for x in part), took

        def p95(values: list[float]) -> float:
            return values[int(len(values) * 0.95) - 1]

        for clients in (8, 16):
            latencies, took = load(clients)
            rows.append(
                (
                    f"status page p95, {clients} concurrent clients (processes), gunicorn 4 workers",
                    f"{p95(latencies):.1f}",
                    "ms",
                    "< 20 ms",
                )
            )
            rows.append(("... median", f"{statistics.median(latencies):.1f}", "ms", ""))
            rows.append(("... throughput", f"{len(latencies) / took:.0f}", "req/s", ""))
        latencies, took = load(16, processes=False)
        rows.append(
            (
                "... the same with 16 client threads in one Python process (client-bound)",
                f"{p95(latencies):.1f}",
                "ms",
                "",
            )
        )
        # The database "hangs": every query on incidents waits behind a lock.
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE tickets_incident IN ACCESS EXCLUSIVE MODE")
            latencies, took = load(8)
            cursor.execute("ROLLBACK")
        rows.append(
            (
                "status page p95, 8 clients, incidents table locked (database hanging)",
                f"{p95(latencies):.1f}",
                "ms",
                "< 20 ms",
            )
        )
    finally:
        server.terminate()
        server.wait(10)
    return rows


def status_only() -> None:
    """Only the status page load (`python -m tests.bench.tickets_bench --status-only`)."""
    import django

    django.setup()
    from django.core.cache import cache
    from django.utils import timezone

    from apps.tickets.services import incident_declare

    cache.clear()
    incident = incident_declare(actor=None, title="Uplink down", keywords=["offline"])
    rows = status_page_load(started_at=incident.started_at or timezone.now())
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    if "--status-only" in sys.argv:
        status_only()
    elif "--mail-only" in sys.argv:
        mail_only()
    else:
        main()
