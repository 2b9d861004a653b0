"""Beat tasks: read every host's traffic counters; roll hours up to days (apps/traffic)."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.traffic import services

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=600)
def traffic_collect() -> None:
    for o in services.traffic_collect():
        log.info("traffic.collected", host=o.host, ok=o.ok, keys=o.keys, changed=o.changed,
                 octets=o.octets, unattributed=o.unattributed, skipped=o.skipped)  # fmt: skip


@shared_task(ignore_result=True, soft_time_limit=600)
def traffic_rollup() -> None:
    outcome = services.traffic_rollup()
    told = services.traffic_summaries_notify()
    log.info("traffic.rolled_up", hours=outcome.rolled_up, deleted=outcome.deleted,
             monthly_summaries=told)  # fmt: skip
