"""One Redis client per process for locks, heartbeats and counters (the cache has its own)."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def redis_client() -> redis.Redis:
    """The shared client for settings.REDIS_URL (short time-outs: a dead Redis must not hang)."""
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=5, decode_responses=True
    )
