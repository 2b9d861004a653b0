"""The portal's Redis connections: one pool per process for locks, heartbeats, counters and live
state (`redis_client`), one for the cache (`PortalRedisCache`), both from settings.REDIS.

With Sentinel (apps/infra/redisconf.py) each new connection asks the sentinels for the current
primary, and a command that meets a dead or demoted primary is retried with back-off for as long
as a failover takes, so a failover shows as a pause of a few seconds instead of an error. Writes
that must survive the failover itself go through `replicated_execute` (Redis WAIT).
"""

from __future__ import annotations

import threading
import time
from functools import cache
from typing import Any

import redis
import structlog
from django.conf import settings
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from apps.infra.redisconf import RETRIES, RedisConfig

log = structlog.get_logger(__name__)

# Short time-outs: a dead Redis must not hang a request.
_TIMEOUTS = {"socket_connect_timeout": 2, "socket_timeout": 5}


def _retry(config: RedisConfig) -> dict[str, Any]:
    if not config.uses_sentinel:
        return {}
    return {
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }


class FailoverConnection(SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels again on every reconnect.

    redis-py 8 reconnects a connection whose command failed (a retry) through
    `connect_check_health()`, which goes straight to the address it had: only `connect()` asks
    the sentinels, and that is called when a connection leaves the pool. A command in flight
    when the primary died was therefore retried against the dead address until its retries ran
    out, however quickly the sentinels promoted the replica (redis-py issue #3874, open).
    """

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self._sock:
            return
        if retry_socket_connect:  # a (re)connect of our own: where is the primary now?
            self.connect()
            return
        # connect_to(): the address the sentinels just named
        super().connect_check_health(check_health=check_health, retry_socket_connect=False)


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
            connection_class=FailoverConnection,
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
    replica_wait.cache_clear()
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


# --- Writes that must survive a failover ----------------------------------------------------------

# After a wait that no replica answered (the replica is down), writes go on without waiting this
# long: a missing replica costs one time-out per process and minute, not one per write.
UNREPLICATED_BACKOFF = 60.0


class ReplicaWait:
    """Redis `WAIT` after durable writes, and what it saw. Redis replicates asynchronously, so a
    write the primary acknowledged may be missing on the replica a failover promotes; WAIT on the
    connection that made the write returns once `replicas` replicas hold it (and everything the
    primary did before it). Without a replica it gives up after `timeout_ms`, logs it and does
    not wait again for `UNREPLICATED_BACKOFF` seconds: the portal stays up on one Redis."""

    def __init__(self, replicas: int, timeout_ms: int) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self._skip_until = 0.0
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.replicas > 0 and time.monotonic() >= self._skip_until

    def add(self, pipe: Any) -> bool:
        """Queue WAIT as the last command of `pipe` (a non-transactional pipeline: WAIT inside
        MULTI does not wait); returns whether it did."""
        if not self.active:
            return False
        pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
        return True

    def check(self, acked: int) -> None:
        """Record WAIT's answer (how many replicas hold the writes)."""
        if acked >= self.replicas:
            return
        with self._lock:
            self._skip_until = time.monotonic() + UNREPLICATED_BACKOFF
        log.warning(
            "redis.write_not_replicated",
            replicas=acked,
            wanted=self.replicas,
            timeout_ms=self.timeout_ms,
            pause_s=UNREPLICATED_BACKOFF,
        )


@cache
def replica_wait() -> ReplicaWait:
    """This process's `ReplicaWait` from settings.REDIS (waits for nothing without Sentinel)."""
    config: RedisConfig = settings.REDIS
    replicas = config.wait_replicas if config.uses_sentinel else 0
    return ReplicaWait(replicas, config.wait_timeout_ms)


def replicated_execute(pipe: redis.client.Pipeline) -> list[Any]:
    """Execute a non-transactional pipeline, then wait until the replicas hold its writes (with
    Sentinel); returns the replies of the pipeline's own commands."""
    waiter = replica_wait()
    waited = waiter.add(pipe)
    replies = pipe.execute()
    if waited:
        waiter.check(int(replies.pop()))
    return replies
