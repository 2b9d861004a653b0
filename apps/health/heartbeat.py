"""Whether the Celery workers and beat are alive, as the System page and its API show it.

Read from the marks in Redis (apps/infra/heartbeat.py) and a ping to the workers: no database,
so it works during outages."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from apps.infra.celery import FIREWALL_QUEUE, app
from apps.infra.heartbeat import BEAT_KEY, HEARTBEAT_KEY
from apps.infra.redis import redis_client


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
    try:
        client = redis_client()
        beat = _parse(client.get(BEAT_KEY))
        heartbeat = client.hgetall(HEARTBEAT_KEY)
        replies = app.control.inspect(timeout=ping_timeout).active_queues() or {}
    except Exception as exc:
        return CeleryStatus([], None, None, "", redis_error=str(exc))
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
