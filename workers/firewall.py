"""Celery tasks of the firewall pipeline (the `firewall` queue): thin wrappers around services.

The queue is served by one worker process with a thread pool: every task shares the process's
warm snapshot cache, and sites roll out in parallel threads, each under its own lock.
"""

from __future__ import annotations

import gc
import threading
import time

import structlog
from celery import shared_task
from celery.signals import worker_process_init, worker_ready
from django.conf import settings
from django.db import connection

from apps.firewall import compiled, order, pipeline, rollout
from apps.firewall.models import FirewallHost, Site
from apps.infra.celery import FIREWALL_QUEUE
from apps.infra.handover import WARM_TIMEOUT, handover_active, handover_ready

log = structlog.get_logger(__name__)


def snapshot_cache_warm() -> None:
    """Build this process's typed members (apps.firewall.snapshot) and compile every enabled
    host once before the first change arrives: at 20,000 members the first read costs about a
    second, and the compile leaves the bundle each host runs in this process's compile cache,
    so the first change after a (re)start is sent as an increment like every later one. It
    also opens the SSH connections to the hosts (PORTAL_FIREWALL_WARM_CONNECT)."""
    timings: dict[str, float] = {}
    try:
        hosts = compiled.compiled_warm(connect=settings.PORTAL_FIREWALL_WARM_CONNECT,
                                       timings=timings)  # fmt: skip
        # The warm-up leaves millions of long-lived objects (members, compiled bundles) in the
        # collector's oldest generation without walking them (`gc_paused`). CPython's first
        # full collection after that walks every one of them (1.2-1.9 s at 100,000 members)
        # and lands on some change's run. One here, before the first task, also makes the
        # collector count them as long-lived: the next full collection waits for a quarter as
        # many new survivors.
        started = time.monotonic()
        gc.collect()
        timings["gc"] = round(time.monotonic() - started, 3)
        log.info("firewall.snapshot_cache_warm", hosts=hosts, seconds=timings)
    except Exception as exc:  # a warm-up must never stop a worker
        log.warning("firewall.snapshot_cache_warm_failed", error=str(exc))
    finally:
        connection.close()  # this thread's own connection


def _snapshot_cache_warm_start(**_kwargs: object) -> threading.Thread | None:
    """Warm the cache in a thread of its own (a task that compiles meanwhile waits on the
    cache lock, then finds it warm)."""
    if not settings.PORTAL_FIREWALL_SYNC:
        return None
    thread = threading.Thread(target=snapshot_cache_warm, name="snapshot-cache-warm", daemon=True)
    thread.start()
    return thread


@worker_ready.connect
def _warm_when_serving_firewall(sender: object = None, **_kwargs: object) -> None:
    """The firewall queue's worker (a thread pool: no pool process starts) warms at start,
    before it takes its first task: Celery sends worker_ready after subscribing and before its
    event loop fetches a message, so a change that arrives meanwhile waits in the queue for the
    warm caches and open connections instead of compiling cold beside the warm-up (two cold
    compiles sharing the interpreter took ~8 s at 20,000 members; the warm-up alone ~4 s, a
    warm change ~1 s). Bounded by PORTAL_FIREWALL_WARM_WAIT; the warm-up goes on after it.
    Under the handover supervisor (apps/infra/handover.py, a reload) the old worker serves
    meanwhile: this one waits for its whole warm-up, says it is warm, waits until the old one
    has stopped, then catches up with what that one pushed (`compiled.delta_catch_up`)."""
    consumer = getattr(sender, "task_consumer", None)
    queues = {q.name for q in getattr(consumer, "queues", ())}
    if FIREWALL_QUEUE not in queues:
        return
    thread = _snapshot_cache_warm_start()
    started = time.monotonic()
    if thread is not None:
        # Under the handover supervisor the old worker serves meanwhile: wait for the whole
        # warm-up (bounded by the supervisor's own timeout).
        wait = WARM_TIMEOUT if handover_active() else settings.PORTAL_FIREWALL_WARM_WAIT
        thread.join(timeout=wait)
        log.info(
            "firewall.warm_wait",
            seconds=round(time.monotonic() - started, 3),
            done=not thread.is_alive(),
        )
    if handover_ready():  # warm; the old worker has stopped when this returns
        went = time.monotonic()
        timings: dict[str, float] = {}
        try:
            hosts = compiled.delta_catch_up(timings=timings) if thread is not None else []
            log.info("firewall.handover_catch_up", hosts=hosts, seconds=timings)
        except Exception as exc:  # the next change compiles in full
            log.warning("firewall.handover_catch_up_failed", error=str(exc))
        finally:
            connection.close()
        log.info(
            "firewall.handover_done",
            seconds=round(time.monotonic() - started, 3),
            after_go=round(time.monotonic() - went, 3),
        )


# A prefork worker that serves the firewall queue warms each pool process too.
worker_process_init.connect(_snapshot_cache_warm_start)

# How long a task waits for a running compile/rollout of its site before it gives the thread
# back and retries (a run takes about a second; a dead holder's lock expires after its TTL).
LOCK_WAIT = 5.0


@shared_task(bind=True, max_retries=None, acks_late=True)
def firewall_sync(self, site_id: int | None = None, cause: str = "") -> None:  # type: ignore[no-untyped-def]
    """Compile one site's hosts and roll the bundles out, one run per site at a time. Without
    `site_id`: schedule every site."""
    if site_id is None:
        pipeline.firewall_change_request(cause=cause or "sync", force=True)
        return
    site = Site.objects.filter(pk=site_id).first()
    if site is None:
        return  # deleted since
    try:
        with pipeline.site_lock(site.pk, wait=LOCK_WAIT):
            causes, requests = pipeline.firewall_causes_take(site.pk)
            summary = "; ".join(causes[:20]) or cause or "sync"
            timings: dict[str, float] = {}
            try:
                outcomes = rollout.site_sync(site=site, cause=summary, timings=timings)
            except compiled.CompileError as exc:
                log.error("firewall.compile_failed", site=site.name, error=str(exc))
                pipeline.push_request_report(requests, site=site.name, outcome={"error": str(exc)})
                return
            pipeline.push_request_report(
                requests,
                site=site.name,
                outcome={
                    "pushed": [o.host for o in outcomes if o.ok and not o.skipped],
                    "unchanged": [o.host for o in outcomes if o.skipped and not o.message],
                    "skipped": [
                        {"host": o.host, "why": o.message, "pinned_to": o.pinned_to}
                        for o in outcomes
                        if o.skipped and o.message
                    ],
                    "failed": [
                        {"host": o.host, "step": o.step, "why": o.message}
                        for o in outcomes
                        if not o.ok
                    ],
                },
            )
            log.info(
                "firewall.synced",
                site=site.name,
                cause=summary,
                hosts={o.host: ("ok" if o.ok else o.step) for o in outcomes},
                seconds=timings,
            )
            if any(o.unreachable for o in outcomes):
                # Nothing is lost while a host is down: try again with backoff.
                countdown = min(300, 5 * 2 ** min(self.request.retries, 6))
                raise self.retry(
                    countdown=countdown,
                    kwargs={"site_id": site.pk, "cause": "retry: host unreachable"},
                )
    except pipeline.LockBusy:
        raise self.retry(countdown=1) from None


@shared_task(bind=True, max_retries=None, acks_late=True)
def host_rollback(self, host_id: int, version_id: int, actor_id: int | None = None) -> None:  # type: ignore[no-untyped-def]
    """Push the version staff pinned a host to (their "put #N back")."""
    host = FirewallHost.objects.select_related("pinned_version").get(pk=host_id)
    if host.pinned_version_id != version_id:
        return  # unpinned or pinned elsewhere since: that request is void
    try:
        with pipeline.site_lock(host.site_id, wait=LOCK_WAIT):
            host.refresh_from_db()
            if host.pinned_version_id != version_id:
                return
            outcome = order.host_rollback(host=host)
    except pipeline.LockBusy:
        raise self.retry(countdown=1) from None
    log.info(
        "firewall.rollback", host=host.name, version=version_id, ok=bool(outcome and outcome.ok)
    )
