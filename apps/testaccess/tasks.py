"""The beat task that ends test accesses: warn their members beforehand, end expired ones."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.testaccess.services import expired_test_accesses_end, expiring_test_accesses_notify

log = structlog.get_logger(__name__)


# Registered under its name from before the app had its own module: the beat schedule and any
# task already queued under that name keep working.
@shared_task(name="workers.network.expire_test_accesses", ignore_result=True, soft_time_limit=300)
def expire_test_accesses() -> dict[str, int]:
    """Mail members whose test access ends soon (once per end date), then end expired ones."""

    noticed = expiring_test_accesses_notify()
    ended = expired_test_accesses_end()
    if noticed or ended:
        log.info("test_access.expire", noticed=len(noticed), ended=len(ended))
    return {"noticed": len(noticed), "ended": len(ended)}
