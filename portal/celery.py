"""The Celery app: tasks live in `workers/`, configuration in Django settings (CELERY_*)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.signals import setup_logging
from redbeat import RedBeatScheduler

from portal.logs import bind_celery_task_ids

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery(
    "portal",
    include=[
        "workers.abuse",
        "workers.dhcp",
        "workers.firewall",
        "workers.health",
        "workers.mail",
        "workers.network",
        "workers.notifications",
        "workers.traffic",
        "workers.retention",
    ],
)
app.config_from_object("django.conf:settings", namespace="CELERY")


@setup_logging.connect(weak=False)
def _portal_logging(**_: Any) -> None:
    """Workers and beat log through Django's LOGGING (portal/logs.py), not Celery's format."""
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


bind_celery_task_ids()


class PortalScheduler(RedBeatScheduler):
    """Beat's scheduler: celery-redbeat (the schedule's state and a lock in Redis, so beat runs
    on two hosts with one active), which also records that beat itself is alive (for the status
    page). A beat waiting for the lock does not tick, so only the active one is seen alive."""

    _last_beat = 0.0

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        # celery-redbeat tells "set" from "fallen back to the broker's" by the bare names
        # (redbeat_*), which the CELERY_ namespace of Django's settings hides: name them.
        names = ("redbeat_redis_url", "redbeat_redis_options", "redbeat_key_prefix")
        app.conf.update({name: app.conf[name] for name in (*names, "redbeat_lock_timeout")})
        super().__init__(app, *args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = time.monotonic()
        if now - self._last_beat >= 2:
            from apps.health.heartbeat import beat_alive_mark

            try:
                beat_alive_mark()
                self._last_beat = now
            except Exception:
                self._last_beat = now
        return super().tick(*args, **kwargs)
