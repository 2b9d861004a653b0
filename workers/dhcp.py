"""Beat task: read every DHCP host's leases into the history (bounded by the retention setting)."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.dhcp import services

log = structlog.get_logger(__name__)


@shared_task(ignore_result=True, soft_time_limit=120)
def dhcp_leases_collect() -> None:
    """One collection from every enabled DHCP host (see apps/dhcp/services.py)."""
    for outcome in services.leases_collect():
        log.info("dhcp.leases", host=outcome.host, ok=outcome.ok, leases=outcome.leases,
                 written=outcome.written, skipped=outcome.skipped, full=outcome.full,
                 gone=outcome.gone, source=outcome.source)  # fmt: skip
