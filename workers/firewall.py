"""Celery tasks of the firewall pipeline: thin wrappers around apps.firewall services."""

from __future__ import annotations

import threading

import structlog
from celery import shared_task
from celery.signals import worker_process_init

log = structlog.get_logger(__name__)


def snapshot_cache_warm() -> None:
    """Build this process's typed members (apps.firewall.selectors) before the first change
    arrives: at 20,000 members the first read costs about a second, later ones a tenth."""
    from django.db import connection

    from apps.firewall.models import FirewallHost
    from apps.firewall.selectors import snapshot_data_read

    try:
        if FirewallHost.objects.filter(enabled=True).exists():
            members = len(snapshot_data_read().members)
            log.info("firewall.snapshot_cache_warm", members=members)
    except Exception as exc:  # a warm-up must never stop a worker
        log.warning("firewall.snapshot_cache_warm_failed", error=str(exc))
    finally:
        connection.close()  # this thread's own connection


@worker_process_init.connect
def _snapshot_cache_warm_start(**_kwargs: object) -> None:
    """Each pool process warms its cache in the background (tasks need not wait for it; one
    that compiles meanwhile waits on the cache lock, then finds it warm)."""
    from django.conf import settings

    if settings.PORTAL_FIREWALL_SYNC:
        threading.Thread(
            target=snapshot_cache_warm, name="snapshot-cache-warm", daemon=True
        ).start()


# How long a task waits for a running compile/rollout before it gives the pool process back
# and retries (a run takes about a second; a dead holder's lock expires after its TTL).
LOCK_WAIT = 5.0


@shared_task(bind=True, max_retries=None, acks_late=True, soft_time_limit=600)
def firewall_sync(self, cause: str = "") -> None:  # type: ignore[no-untyped-def]
    """Compile the database for every host and roll it out, one run at a time."""
    from apps.firewall.pipeline import LockBusy, firewall_causes_take, firewall_lock
    from apps.firewall.services import (
        CompileError,
        ruleset_compile,
        ruleset_rollout,
        version_snapshots_store,
    )

    try:
        with firewall_lock(wait=LOCK_WAIT):
            causes = firewall_causes_take()
            summary = "; ".join(causes[:20]) or cause or "sync"
            try:
                versions = ruleset_compile(cause=summary)
            except CompileError as exc:
                log.error("firewall.compile_failed", error=str(exc))
                return
            outcomes = ruleset_rollout(versions=versions)
            version_snapshots_store(versions=versions)  # off the critical path: after the rollout
            log.info(
                "firewall.synced",
                cause=summary,
                hosts={o.host: ("ok" if o.ok else o.step) for o in outcomes},
            )
            if any(o.unreachable for o in outcomes):
                # Nothing is lost while a host is down: try again with backoff.
                countdown = min(300, 5 * 2 ** min(self.request.retries, 6))
                raise self.retry(countdown=countdown, kwargs={"cause": "retry: host unreachable"})
    except LockBusy:
        raise self.retry(countdown=1) from None


@shared_task(bind=True, max_retries=None, acks_late=True, soft_time_limit=300)
def host_rollback(self, host_id: int, version_id: int) -> None:  # type: ignore[no-untyped-def]
    """Put a stored version back on one host (staff's "roll back to version X")."""
    from apps.firewall.models import FirewallHost, RuleSetVersion
    from apps.firewall.pipeline import LockBusy, firewall_lock
    from apps.firewall.services import host_rollback as rollback

    host = FirewallHost.objects.get(pk=host_id)
    version = RuleSetVersion.objects.get(pk=version_id, host=host)
    try:
        with firewall_lock(wait=LOCK_WAIT):
            outcome = rollback(host=host, version=version)
    except LockBusy:
        raise self.retry(countdown=1) from None
    log.info("firewall.rollback", host=host.name, version=version.pk, ok=outcome.ok)
