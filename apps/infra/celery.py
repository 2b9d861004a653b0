"""The Celery app: tasks live in `workers/`, configuration in Django settings (CELERY_*)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_prerun
from celery.worker.consumer import Consumer
from redbeat import RedBeatScheduler

from apps.infra.logs import bind_celery_task_ids

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# The queue of the firewall worker (CELERY_TASK_ROUTES): one process that keeps the warm snapshot
# cache for every push and never waits behind mail.
FIREWALL_QUEUE = "firewall"

app = Celery(
    "portal",
    include=[
        "workers.abuse",
        "workers.alerts",
        "workers.dhcp",
        "workers.firewall",
        "workers.health",
        "workers.mail",
        "workers.notifications",
        "workers.traffic",
        "workers.retention",
        "workers.status",
        "apps.testaccess.tasks",  # the beat task of test accesses, with its app
    ],
)
app.config_from_object("django.conf:settings", namespace="CELERY")


def task_send(name: str, *args: Any, countdown: float | None = None) -> None:
    """Send the Celery task `name` ("workers.mail.ticket_message_send") by its name, so that a
    service never imports the task module, which imports the service. Celery's send_task ignores
    task_always_eager; here, as with .delay(), the task then runs in this process (tests)."""
    if app.conf.task_always_eager:
        module, _, function = name.rpartition(".")
        getattr(importlib.import_module(module), function).apply(args=args)
        return
    app.send_task(name, args=args, countdown=countdown)


@app.on_after_configure.connect(weak=False)
def _broker_failover(sender: Celery, **_: Any) -> None:
    # needs Django, and this module loads before the settings
    from apps.infra.broker import keep_on_failover

    keep_on_failover(sender.conf.broker_transport)


class PortalConsumer(Consumer):
    """Celery's consumer (CELERY_WORKER_CONSUMER), trying to reconnect to the broker after 0.5,
    1, 1.5, ... and then every 5 s instead of Celery's 2, 4, 6, ... 30 s: a Sentinel failover
    takes a few seconds, and firewall pushes went on up to half a minute after it."""

    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=0.5, interval_step=0.5, interval_max=5
        )
        return super().ensure_connected(conn)


@setup_logging.connect(weak=False)
def _portal_logging(**_: Any) -> None:
    """Workers and beat log through Django's LOGGING (apps/infra/logs.py), not Celery's format."""
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


@task_prerun.connect(weak=False)
def _content_types_read_afresh(task: Any = None, **_: Any) -> None:
    """Each task starts with an empty ContentType cache. Django keeps content type ids for the
    life of a process; a worker outlives a restore of the database (and, in tests, the flush
    between transactional tests), where the content types come back under other ids, and it
    went on writing audit entries with the old ones (an FK error, or another type). Costs one
    query per model a task first needs a content type of; eager tasks (tests) keep the cache."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    # needs Django, and this module loads before the settings
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()


bind_celery_task_ids()


class PortalScheduler(RedBeatScheduler):
    """Beat's scheduler: celery-redbeat (the schedule's state and a lock in Redis, so beat runs
    on two hosts with one active), which also records that beat itself is alive (for the status
    page). A beat waiting for the lock does not tick, so only the active one is seen alive.

    redbeat talks to Redis through the portal's own client (apps.infra.redis): the same server or
    sentinels as everything else, each new connection asking the sentinels for the primary and
    every command retried across a failover. (redbeat's own Sentinel client retries single
    commands only, not the pipelines it reads the schedule with, and a failed lock renewal ended
    beat's loop.) A tick that meets no Redis is tried again a second later; a beat that lost its
    lock (it expired during a long failover and the other host's beat took it) goes back to
    waiting for it instead of sending beside the new active one."""

    _last_beat = 0.0

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        # needs Django, and this module loads before the settings
        from apps.infra.redis import redis_client

        # celery-redbeat tells "set" from "fallen back to the broker's" by the bare names
        # (redbeat_*), which the CELERY_ namespace of Django's settings hides: name them.
        names = ("redbeat_redis_url", "redbeat_redis_options", "redbeat_key_prefix")
        app.conf.update({name: app.conf[name] for name in (*names, "redbeat_lock_timeout")})
        app.redbeat_redis = redis_client()  # redbeat's get_redis() returns it as it is
        super().__init__(app, *args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        import redis
        import structlog

        log = structlog.get_logger("portal.beat")
        try:
            if self.lock_key and self.lock is None:
                self._lock_wait()  # redbeat's start-up acquire failed (no Redis then)
            interval = super().tick(*args, **kwargs)
        except redis.exceptions.LockError:
            log.warning("beat.lock_lost", lock=self.lock_key)
            self._lock_wait()
            return 0.0
        except redis.RedisError as exc:
            log.warning("beat.redis_unavailable", error=str(exc))
            return 1.0
        self._alive_mark()
        return interval

    def _lock_wait(self) -> None:
        """Wait until this beat holds the lock (another one may be active meanwhile)."""
        import redis
        from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, get_redis

        client = get_redis(self.app)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)  # as redbeat does
        while True:
            try:
                lock.acquire()
                break
            except redis.RedisError:
                time.sleep(1)
        self.lock = lock

    def _alive_mark(self) -> None:
        now = time.monotonic()
        if now - self._last_beat < 2:
            return
        # needs Django, and this module loads before the settings
        from apps.infra.heartbeat import beat_alive_mark

        self._last_beat = now
        with contextlib.suppress(Exception):  # the status page's mark never stops beat
            beat_alive_mark()
