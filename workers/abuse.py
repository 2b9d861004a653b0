"""Beat task: forget address holdings older than the retention setting."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.abuse import services

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=600)
def abuse_history_prune() -> None:
    """Delete holdings that ended more than PORTAL_ABUSE_HISTORY_DAYS ago."""
    log.info("abuse.history_pruned", deleted=services.holdings_prune())
