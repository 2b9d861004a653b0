"""Liveness of the Celery worker and beat, kept in Redis (no database: works during outages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from portal.redis import redis_client

HEARTBEAT_KEY = "portal:heartbeat"
BEAT_KEY = "portal:beat"


def beat_alive_mark() -> None:
    """Record that beat is scheduling (called from beat's own tick)."""
    redis_client().set(BEAT_KEY, timezone.now().isoformat(), ex=3600)


def heartbeat_record(*, worker: str) -> None:
    """Record that a worker ran the heartbeat task that beat sent."""
    redis_client().hset(HEARTBEAT_KEY, mapping={"at": timezone.now().isoformat(), "worker": worker})


@dataclass(frozen=True)
class CeleryStatus:
    """What the status page shows about the background processes."""

    workers: list[str]
    beat_seen: datetime | None
    heartbeat_seen: datetime | None
    heartbeat_worker: str
    redis_error: str
    firewall_workers: list[str] = field(default_factory=list)  # serving the firewall queue

    @property
    def max_age_seconds(self) -> int:
        return max(3 * settings.PORTAL_HEARTBEAT_INTERVAL, 15)

    def _fresh(self, seen: datetime | None) -> bool:
        return seen is not None and (timezone.now() - seen).total_seconds() <= self.max_age_seconds

    @property
    def workers_alive(self) -> bool:
        return bool(self.workers)

    @property
    def firewall_queue_served(self) -> bool:
        """Some worker consumes the firewall queue (else no change ever reaches a host)."""
        return bool(self.firewall_workers)

    @property
    def beat_alive(self) -> bool:
        return self._fresh(self.beat_seen)

    @property
    def heartbeat_alive(self) -> bool:
        return self._fresh(self.heartbeat_seen)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def celery_status(*, ping_timeout: float = 1.0) -> CeleryStatus:
    """Ask the workers for a ping and read the beat and heartbeat marks."""
    from portal.celery import app

    try:
        client = redis_client()
        beat = _parse(client.get(BEAT_KEY))
        heartbeat = client.hgetall(HEARTBEAT_KEY)
        replies = app.control.inspect(timeout=ping_timeout).active_queues() or {}
    except Exception as exc:
        return CeleryStatus([], None, None, "", redis_error=str(exc))
    from apps.firewall.dispatch import FIREWALL_QUEUE

    workers = sorted(replies)
    firewall = sorted(
        name for name, queues in replies.items() if any(q["name"] == FIREWALL_QUEUE for q in queues)
    )
    return CeleryStatus(
        workers=workers,
        beat_seen=beat,
        heartbeat_seen=_parse(heartbeat.get("at")),
        heartbeat_worker=heartbeat.get("worker", ""),
        redis_error="",
        firewall_workers=firewall,
    )
