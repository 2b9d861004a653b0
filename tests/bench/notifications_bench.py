"""Notification benchmark, run by tests/bench/run.py in a subprocess against a scratch database.

An outage is declared for a building of 5,000 members through the support page (a real request
through the Django test client; the task goes to the real Redis broker), and a real Celery
worker makes the notices and mails them to an SMTP sink. Prints one JSON list of rows (name,
value, unit, target) on the last line of stdout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.tickets_bench import ROOT, Sink, free_port

MEMBERS = 5000
OTHERS = 500  # in another building: must not be told


def _people(building: object, count: int, prefix: str) -> None:
    """`count` active members, one per room, in `building` (bulk inserts)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.members.choices import MemberStatus
    from apps.members.models import Member, Room

    now = timezone.now()
    users = get_user_model().objects.bulk_create(
        get_user_model()(
            username=f"{prefix}{n}", first_name="Res", last_name=f"{n}", email=f"{prefix}{n}@x.org"
        )
        for n in range(count)
    )
    rooms = Room.objects.bulk_create(
        Room(building=building, number=f"{n}", label=f"{building.code}-{n}") for n in range(count)
    )
    Member.objects.bulk_create(
        Member(user=u, room=r, status=MemberStatus.ACTIVE, status_since=now, registered_at=now)
        for u, r in zip(users, rooms, strict=True)
    )


def _worker(sink_port: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(sink_port),
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        PORTAL_NOTIFICATIONS_GATHER_SECONDS="0",
    )
    celery = str(Path(sys.executable).with_name("celery"))
    return subprocess.Popen(
        [celery, "-A", "portal", "worker", "-Q", "celery", "--pool", "solo", "-l", "WARNING"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def main() -> None:
    import django

    django.setup()
    from aiosmtpd.controller import Controller
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    from apps.infra.celery import app as celery_app
    from apps.members.models import Building
    from apps.notifications.models import Notice
    from apps.tickets.models import Incident

    call_command("flush", "--no-input", verbosity=0)
    cache.clear()
    celery_app.control.purge()  # nothing queued by an earlier run
    x = Building.objects.create(code="X", name="House X")
    y = Building.objects.create(code="Y", name="House Y")
    _people(x, MEMBERS, "x")
    _people(y, OTHERS, "y")
    staff = get_user_model().objects.create_user("bench-support", is_staff=True, is_superuser=True)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the test client's host
    client = Client()
    client.force_login(staff)
    sink = Sink()
    sink_port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=sink_port)
    controller.start()
    rows = []

    # 1. The declare request, 10 times, while no worker runs: what the request itself costs
    #    (its task waits in the broker; the queue is purged afterwards).
    latencies = []
    for n in range(10):
        start = time.perf_counter()
        response = client.post(
            reverse("tickets:incident_list"),
            {
                "title": f"Warm-up {n}",
                "severity": "major",
                "buildings": [x.pk],
                "started_at": "2026-11-25T10:00",
                "public": "on",
            },
        )
        latencies.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 302, response.status_code
    celery_app.control.purge()
    worker = _worker(sink_port)
    try:
        time.sleep(3)  # the worker connects to the broker
        start = time.perf_counter()
        response = client.post(
            reverse("tickets:incident_list"),
            {
                "title": "Switch in X dead",
                "severity": "major",
                "buildings": [x.pk],
                "started_at": "2026-11-25T10:00",
                "public": "on",
            },
        )
        declared = (time.perf_counter() - start) * 1000
        assert response.status_code == 302, response.status_code
        incident = Incident.objects.get(title="Switch in X dead")
        notices = Notice.objects.filter(params__incident=incident.pk)
        while notices.count() < MEMBERS and time.perf_counter() - start < 600:
            time.sleep(0.05)
        made_after = time.perf_counter() - start
        delivered = sink.wait_for(MEMBERS, 600)
        total = time.perf_counter() - start
        made = notices.count()
        others = notices.filter(member__room__building=y).count()
        mailed = notices.filter(mailed_at__isnull=False).count()
    finally:
        worker.terminate()
        worker.wait(15)
        controller.stop()
    rows += [
        (
            f"declare an incident for a building of {MEMBERS:,} members (support page request)",
            f"{declared:.0f}",
            "ms",
            "< 300 ms",
        ),
        (
            "... median of 10 more while no worker runs (max)",
            f"{statistics.median(latencies):.0f} ({max(latencies):.0f})",
            "ms",
            "",
        ),
        (
            f"... declare to the last of {MEMBERS:,} mails in an SMTP sink (one Celery worker, solo)",
            f"{total:.1f}",
            "s",
            "< 120 s",
        ),
        ("... notices made", f"{made}", "notices", f"{MEMBERS}"),
        ("... every member's notice on their page after", f"{made_after:.1f}", "s", ""),
        (
            "... mails delivered to the sink",
            f"{sink.count}",
            "mails",
            f"{MEMBERS}" + ("" if delivered else " (MISSING)"),
        ),
        ("... notices marked mailed", f"{mailed}", "notices", f"{MEMBERS}"),
        (f"... members of the other building ({OTHERS}) told", f"{others}", "notices", "0"),
        ("... rate", f"{sink.count / total:.0f}", "mails/s", ""),
    ]
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    main()
