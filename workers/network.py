"""Beat tasks about network state: expire test accesses and warn their members beforehand."""

from __future__ import annotations

import structlog
from celery import shared_task

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=300)
def expire_test_accesses() -> dict[str, int]:
    """Mail members whose test access ends soon (once per end date), then end expired ones."""
    from apps.members.services import expired_test_accesses_end, expiring_test_accesses_notify

    noticed = expiring_test_accesses_notify()
    ended = expired_test_accesses_end()
    if noticed or ended:
        log.info("test_access.expire", noticed=len(noticed), ended=len(ended))
    return {"noticed": len(noticed), "ended": len(ended)}
