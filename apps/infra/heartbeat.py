"""Liveness marks of the Celery worker and beat, kept in Redis (no database: works during
outages). Beat marks itself from its own tick (apps/infra/celery.py); the health app reads the
marks for the System page (apps/health/heartbeat.py)."""

from __future__ import annotations

from django.utils import timezone

from apps.infra.redis import redis_client

HEARTBEAT_KEY = "portal:heartbeat"
BEAT_KEY = "portal:beat"


def beat_alive_mark() -> None:
    """Record that beat is scheduling (called from beat's own tick)."""
    redis_client().set(BEAT_KEY, timezone.now().isoformat(), ex=3600)


def heartbeat_record(*, worker: str) -> None:
    """Record that a worker ran the heartbeat task that beat sent."""
    redis_client().hset(HEARTBEAT_KEY, mapping={"at": timezone.now().isoformat(), "worker": worker})
