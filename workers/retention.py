"""Beat task: bound every table that grows with time (apps/operations/retention.py)."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.operations import retention

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=3000)
def retention_run() -> dict[str, int]:
    """Delete what is older than its retention setting; rows deleted per table."""
    return retention.retention_run()
