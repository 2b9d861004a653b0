"""The Celery app: tasks live in `workers/`, configuration in Django settings (CELERY_*)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from celery.signals import setup_logging

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


class PortalScheduler(PersistentScheduler):
    """Beat's scheduler, which also records that beat itself is alive (for the status page)."""

    _last_beat = 0.0

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
