"""Beat tasks: read every host's traffic counters; roll hours up to days (apps/traffic)."""

from __future__ import annotations

import structlog
from celery import shared_task

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=600)
def traffic_collect() -> None:
    from apps.traffic.services import traffic_collect as collect

    for o in collect():
        log.info("traffic.collected", host=o.host, ok=o.ok, keys=o.keys, changed=o.changed,
                 octets=o.octets, unattributed=o.unattributed, skipped=o.skipped)  # fmt: skip


@shared_task(ignore_result=True, soft_time_limit=600)
def traffic_rollup() -> None:
    from apps.traffic.services import traffic_rollup as rollup
    from apps.traffic.services import traffic_summaries_notify

    outcome = rollup()
    told = traffic_summaries_notify()
    log.info("traffic.rolled_up", hours=outcome.rolled_up, deleted=outcome.deleted,
             monthly_summaries=told)  # fmt: skip
