"""Kombu's Redis Sentinel transport, with publishes that survive a failover.

Redis replicates asynchronously: a task the primary acknowledged (LPUSH) in the instant before it
crashed may be missing on the replica the sentinels promote, and the task is lost although the
sender was told it was sent. This channel sends each publish and a `WAIT` for the replicas on one
connection (WAIT covers the writes of its own connection), so `apply_async` returns once a
replica holds the task. Without a replica it waits `wait_timeout_ms` once, logs it and goes on
(`apps.infra.redis.ReplicaWait`).

A publish whose connection breaks after the LPUSH but before WAIT's answer is sent again by
Celery's publish retry, so a task may arrive twice (never zero times): the portal's tasks are
idempotent (a firewall run compiles the whole database; the beat tasks look at the current state).

Selected by `CELERY_BROKER_TRANSPORT` (apps/infra/redisconf.py) when `REDIS_SENTINELS` is set (with
`REDIS_WAIT_REPLICAS=0` publishes do not wait); the options come from
`CELERY_BROKER_TRANSPORT_OPTIONS`. Kombu's
failover (`Connection.switch` to the next sentinel's URL) builds the transport from that URL's
scheme, not from the setting: `keep_on_failover` names this transport for the `sentinel` scheme,
so a connection that failed over still waits for the replicas.
"""

from __future__ import annotations

from typing import Any

import kombu.transport
from kombu.transport.redis import SentinelChannel, SentinelTransport
from kombu.utils.json import dumps
from redis.exceptions import ConnectionError as RedisConnectionError

from apps.infra.redis import FailoverConnection, ReplicaWait

__all__ = ["ReplicatedSentinelChannel", "ReplicatedSentinelTransport", "keep_on_failover"]

TRANSPORT = "apps.infra.broker:ReplicatedSentinelTransport"


class ReplicatedSentinelChannel(SentinelChannel):
    """A Sentinel channel whose publishes return once `wait_replicas` replicas hold them."""

    from_transport_options = (
        *SentinelChannel.from_transport_options,
        "wait_replicas",
        "wait_timeout_ms",
    )

    # A publish retried after the primary died reconnects to the primary the sentinels name now.
    connection_class = FailoverConnection
    wait_replicas = 1
    wait_timeout_ms = 500
    _replica_wait: ReplicaWait | None = None

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # A channel of a connection the worker gave up after a failover (Celery's consumer calls
        # `Connection.collect()`, which detaches the transport) may still be asked to put back or
        # acknowledge a message it delivered; Kombu then tried to open a new pool from the
        # detached transport and raised AttributeError, which ended the worker. A connection
        # error instead is what Kombu and Celery expect from a lost broker: the message stays in
        # Redis's unacknowledged set and is delivered again after the visibility timeout.
        if self.connection.client is None:
            raise RedisConnectionError("this broker connection was closed after a failover")
        return super()._connparams(asynchronous=asynchronous)

    @property
    def replica_wait(self) -> ReplicaWait:
        if self._replica_wait is None:
            self._replica_wait = ReplicaWait(int(self.wait_replicas), int(self.wait_timeout_ms))
        return self._replica_wait

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        if kwargs.get("_publish_batch") is not None:
            # Batched publishing (not used by Celery's apply_async) keeps kombu's behaviour.
            super()._put(queue, message, **kwargs)
            return
        priority = self._get_message_priority(message, reverse=False)
        key = self._q_for_pri(queue, priority)
        with self.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:
            pipe.lpush(key, dumps(message))
            if self._expires and queue in self._expires:
                for step in self.priority_steps:
                    pipe.pexpire(self._q_for_pri(queue, step), self._expires[queue])
            waited = self.replica_wait.add(pipe)
            replies = pipe.execute()
        if waited:
            self.replica_wait.check(int(replies[-1]))


class ReplicatedSentinelTransport(SentinelTransport):
    """`sentinel://` URLs with `ReplicatedSentinelChannel`."""

    Channel = ReplicatedSentinelChannel


def keep_on_failover(transport: str | None) -> None:
    """When the broker's transport is this module's, make the `sentinel://` URLs Kombu fails over
    to use it too (without this, the first failover of a connection quietly switched it to
    Kombu's own Sentinel transport, whose publishes do not wait for a replica)."""
    if transport == TRANSPORT:
        kombu.transport.TRANSPORT_ALIASES["sentinel"] = TRANSPORT
        # Kombu caches each name's class once resolved: forget the old one if it was.
        kombu.transport._transport_cache.pop("sentinel", None)
