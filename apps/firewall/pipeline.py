"""From "the network changed" to "every firewall runs it": debounce, one run at a time.

A change marks the network dirty and schedules one compile-and-rollout run a moment later, so
a burst of changes becomes a handful of runs. A run holds a Redis lock with an expiry: a run
that dies (even by SIGKILL) cannot keep it, and the task is delivered again (acks_late), so the
system converges. A run clears its "scheduled" mark before it reads the database: a change
after that point schedules the next run, which waits for the lock and carries it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from portal.redis import redis_client

LOCK_KEY = "portal:firewall:lock"
SCHEDULED_KEY = "portal:firewall:scheduled"
CAUSES_KEY = "portal:firewall:causes"
SCHEDULED_TTL = 10  # seconds

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class LockBusy(Exception):
    """Another compile or rollout holds the lock."""


LOCK_POLL = 0.05  # seconds between attempts while waiting for the lock


@contextmanager
def firewall_lock(ttl: int | None = None, *, wait: float = 0) -> Iterator[str]:
    """Hold the one compile/rollout lock; it expires by itself if the holder dies. With `wait`,
    keep trying that many seconds: a rollout ends in about a second, so a change that arrives
    during one starts right after it instead of at the task's next retry."""
    client = redis_client()
    token = secrets.token_hex(16)
    deadline = time.monotonic() + wait
    while not client.set(LOCK_KEY, token, nx=True, ex=ttl or settings.PORTAL_FIREWALL_LOCK_TTL):
        if time.monotonic() >= deadline:
            raise LockBusy
        time.sleep(LOCK_POLL)
    try:
        yield token
    finally:
        client.eval(_RELEASE, 1, LOCK_KEY, token)


def firewall_change_request(*, cause: str, force: bool = False) -> bool:
    """Record a change and schedule a run unless one is already scheduled; True if scheduled.
    `force` schedules even where automatic runs are switched off (staff's "push now")."""
    from workers.firewall import firewall_sync as firewall_sync_task

    client = redis_client()
    pipe = client.pipeline()
    pipe.rpush(CAUSES_KEY, cause[:200])
    pipe.ltrim(CAUSES_KEY, -200, -1)
    # The mark expires soon: if a scheduled run is ever lost (a purged queue, a flushed broker),
    # the next change schedules again within seconds instead of waiting for it.
    pipe.set(SCHEDULED_KEY, str(time.time()), nx=True, ex=SCHEDULED_TTL)
    scheduled = pipe.execute()[2]
    if scheduled and (settings.PORTAL_FIREWALL_SYNC or force):
        firewall_sync_task.apply_async(countdown=settings.PORTAL_FIREWALL_DEBOUNCE)
    return bool(scheduled)


def firewall_causes_take() -> list[str]:
    """Clear the scheduled mark and take the causes gathered since the last run."""
    client = redis_client()
    pipe = client.pipeline()
    pipe.delete(SCHEDULED_KEY)
    pipe.lrange(CAUSES_KEY, 0, -1)
    pipe.delete(CAUSES_KEY)
    _, causes, _ = pipe.execute()
    return list(dict.fromkeys(causes))


def changes_waiting() -> bool:
    """Changes were recorded but no run is scheduled (its task was lost)."""
    client = redis_client()
    return bool(client.llen(CAUSES_KEY)) and not client.exists(SCHEDULED_KEY)
