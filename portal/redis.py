"""The portal's Redis connections: one pool per process for locks, heartbeats, counters and live
state (`redis_client`), one for the cache (`PortalRedisCache`), both from settings.REDIS.

With Sentinel (portal/redisconf.py) each new connection asks the sentinels for the current
primary, and a command that meets a dead or demoted primary is retried with back-off for as long
as a failover takes, so a failover shows as a pause of a few seconds instead of an error.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from portal.redisconf import RETRIES, RedisConfig

# Short time-outs: a dead Redis must not hang a request.
_TIMEOUTS = {"socket_connect_timeout": 2, "socket_timeout": 5}


def _retry(config: RedisConfig) -> dict[str, Any]:
    if not config.uses_sentinel:
        return {}
    return {
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }


@cache
def redis_sentinel() -> Sentinel:
    """The process's view of the sentinels (only with REDIS_SENTINELS)."""
    config: RedisConfig = settings.REDIS
    return Sentinel(list(config.sentinels), sentinel_kwargs=config.sentinel_kwargs())


@cache
def redis_pool(*, decode: bool) -> redis.ConnectionPool:
    """The shared pool to the Redis primary (str replies with `decode`, bytes for the cache)."""
    config: RedisConfig = settings.REDIS
    if config.uses_sentinel:
        client = redis_sentinel().master_for(
            config.master,
            db=config.db,
            password=config.password or None,
            decode_responses=decode,
            **_TIMEOUTS,
            **_retry(config),
        )
        return client.connection_pool
    return redis.ConnectionPool.from_url(
        config.url, decode_responses=decode, **_TIMEOUTS, **_retry(config)
    )


@cache
def redis_client() -> redis.Redis:
    """The shared client for locks, heartbeats, counters and live state (str replies)."""
    return redis.Redis(connection_pool=redis_pool(decode=True))


def redis_reset() -> None:
    """Forget pools and clients (after the settings changed: tests)."""
    redis_client.cache_clear()
    redis_pool.cache_clear()
    redis_sentinel.cache_clear()


class _PortalCacheClient(RedisCacheClient):
    def _get_connection_pool(self, write: bool) -> redis.ConnectionPool:
        return redis_pool(decode=False)


class PortalRedisCache(RedisCache):
    """Django's Redis cache on the portal's own pool: the same server (or sentinels) and
    time-outs as everything else, and it follows a failover. LOCATION is only a label."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = _PortalCacheClient
