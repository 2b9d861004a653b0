"""A real Celery worker and beat: the status page tells whether they are alive."""

import os
import time

import pytest
from django.urls import reverse

from apps.health.heartbeat import celery_status
from apps.infra.heartbeat import BEAT_KEY, HEARTBEAT_KEY
from apps.infra.redis import redis_client
from tests.celery_proc import celery_start, celery_stop


def start(*args, tmp_path):
    return celery_start(
        *args, log=tmp_path / f"{args[0]}.log", env={"PORTAL_HEARTBEAT_INTERVAL": "1"}
    )


def stop(proc):
    celery_stop(proc)


@pytest.fixture
def clean_marks():
    redis_client().delete(BEAT_KEY, HEARTBEAT_KEY)
    yield
    redis_client().delete(BEAT_KEY, HEARTBEAT_KEY)


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = celery_status(ping_timeout=0.5)
        if predicate(status):
            return status
        time.sleep(0.3)
    return celery_status(ping_timeout=0.5)


def test_nothing_running_shows_as_not_alive(clean_marks):
    status = celery_status(ping_timeout=0.3)
    assert not status.beat_alive
    assert not status.heartbeat_alive


def test_worker_and_beat_are_seen_alive(clean_marks, tmp_path, settings, client_for):
    settings.PORTAL_HEARTBEAT_INTERVAL = 1
    worker = start(
        "worker",
        "--pool",
        "solo",
        "-Q",
        "celery",
        "--hostname",
        f"test-{os.getpid()}@%h",
        "--without-mingle",
        "--without-gossip",
        tmp_path=tmp_path,
    )
    beat = start(
        "beat",
        "--schedule",
        str(tmp_path / "schedule"),
        "--scheduler",
        "apps.infra.celery:PortalScheduler",
        tmp_path=tmp_path,
    )
    try:
        status = wait_for(lambda s: s.workers_alive and s.beat_alive and s.heartbeat_alive, 45)
        logs = {p: (tmp_path / f"{p}.log").read_text() for p in ("worker", "beat")}
        assert status.workers_alive, logs
        assert status.beat_alive, logs
        assert status.heartbeat_alive, logs
        assert any(w.startswith(f"test-{os.getpid()}@") for w in status.workers)
        admin = client_for("admin")
        page = admin.get(reverse("health:system"), HTTP_HX_REQUEST="true")
        text = page.content.decode()
        assert text.count('class="status-ok"') == 3, text
        assert "no worker serves the firewall queue" in text  # only the default queue is served
        firewall = start(
            "worker",
            "-Q",
            "firewall",
            "--pool",
            "threads",
            "--concurrency",
            "2",
            "--hostname",
            f"test-fw-{os.getpid()}@%h",
            "--without-mingle",
            "--without-gossip",
            tmp_path=tmp_path,
        )
        try:
            status = wait_for(lambda s: s.firewall_queue_served, 45)
            assert any(w.startswith(f"test-fw-{os.getpid()}@") for w in status.firewall_workers)
            text = admin.get(reverse("health:system"), HTTP_HX_REQUEST="true").content.decode()
            assert text.count('class="status-ok"') == 4, text
            assert "no worker serves the firewall queue" not in text
        finally:
            stop(firewall)
    finally:
        stop(beat)
        stop(worker)
    # With both gone, the worker no longer answers its ping.
    assert celery_status(ping_timeout=0.5).workers == [] or all(
        not w.startswith(f"test-{os.getpid()}@") for w in celery_status(ping_timeout=0.5).workers
    )
