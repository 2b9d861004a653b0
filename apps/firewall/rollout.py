"""The site run: compile and roll out one site, host by host (the worker holds its lock).

The push path, one module per concern: `compiled` (read the database, compile each host, the
compiled rule sets kept as the base of increments), `versions` (store a version, trim the
history), `texts` (the texts writer thread), `push` (one push to one host: the state machine),
`order` (rollout order, host by host, the backup first), `memo` (everything kept between runs,
in one object). This module runs them for one site and records the site's state.
"""

from __future__ import annotations

import time

import structlog

from apps.firewall.choices import SiteStatus
from apps.firewall.compiled import (
    CompileError,
    delta_base_ensure,
    delta_compile,
    delta_forget,
    delta_render_pending,
    host_compile,
    snapshot_data_for,
)
from apps.firewall.models import FirewallHost, RuleSetVersion, Site
from apps.firewall.order import hosts_rollout
from apps.firewall.pipeline import scheduled_key
from apps.firewall.push import PushOutcome
from apps.firewall.texts import TextsWriter
from apps.firewall.transport import pooled_session_for
from apps.firewall.versions import version_snapshots_store, versions_prune
from apps.infra.redis import redis_client

log = structlog.get_logger(__name__)


def _change_waiting(site: Site) -> bool:
    return bool(redis_client().exists(scheduled_key(site.pk)))


# Causes that compile in full whatever changed: the reconcile interval, staff's "push now",
# a run without a recorded change.
FULL_CAUSES = ("reconcile", "convergence", "push now", "pending changes")


def _full_asked(cause: str) -> bool:
    return cause in ("", "sync") or any(word in cause for word in FULL_CAUSES)


def site_sync(
    *, site: Site, cause: str, timings: dict[str, float] | None = None
) -> list[PushOutcome]:
    """Compile and roll out one site (the caller holds its lock), host by host: each host's
    bundle is compiled while the host before it applies. Records the site's state. `timings`
    receives seconds per phase (read, compile and push per host, snapshots stored, total)."""
    timings = timings if timings is not None else {}
    begun = time.monotonic()

    def timed(name: str, started: float) -> None:
        timings[name] = round(timings.get(name, 0) + time.monotonic() - started, 3)

    site.mark(SiteStatus.ROLLING_OUT)
    hosts = list(
        FirewallHost.objects.filter(site=site, enabled=True).select_related(
            "site", "pinned_version"
        )
    )
    compiled: list[RuleSetVersion] = []
    # The new versions' texts (16 MB per host at 20,000 members) are written while the last
    # host applies, when this process only waits: not beside the compile of the next host.
    texts = TextsWriter()

    def texts_start() -> None:
        for version in compiled:
            texts.start(version)

    deltas: list[RuleSetVersion] = []
    full = _full_asked(cause)

    def full_for(host: FirewallHost) -> RuleSetVersion:
        started = time.monotonic()
        delta_render_pending(host)  # the texts of the delta version the host runs
        delta_forget(host.pk)
        version = host_compile(host=host, data=data, cause=cause, prune=False, texts_later=True)
        compiled.append(version)
        timed(f"compile {host.name}", started)
        return version

    def version_for(host: FirewallHost) -> RuleSetVersion:
        if not full:
            started = time.monotonic()
            version = delta_compile(host=host, data=data, cause=cause)
            if version is not None:
                # Refused by the host's check: compile in full and push that instead.
                version.delta_fallback = lambda: full_for(host)  # type: ignore[attr-defined]
                deltas.append(version)
                timed(f"delta {host.name}", started)
                return version
        return full_for(host)

    # The hosts' handshakes (if their connections are not open already) run while the
    # database is read.
    sessions = {h.pk: pooled_session_for(h).start() for h in hosts if not h.is_pinned}
    try:
        started = time.monotonic()
        # A change's run reads only the members changed since this worker's last read; a full
        # compile (reconcile, push now, ...) checks every member's key.
        data = snapshot_data_for(hosts, since_last=not full)
        timed("read", started)
        started = time.monotonic()
        outcomes = hosts_rollout(hosts, version_for, sessions=sessions, during_last=texts_start)
        timed("rollout", started)
        timings["reused"] = sum(s.reused for s in sessions.values())
    except CompileError as exc:
        site.mark(SiteStatus.FAILED, f"compile: {exc}")
        raise
    finally:
        for session in sessions.values():
            session.close()
        started = time.monotonic()
        texts_start()
        texts.join()
        timed("texts", started)
    # Hosts skipped (pinned) or after a stop get their version too: unpinning pushes it.
    for host in hosts:
        if host.pk not in {v.host_id for v in (*compiled, *deltas)}:
            full_for(host)
    texts_start()
    texts.join()
    if texts.failed:
        log.warning("firewall.version_texts_failed", site=site.name, failed=texts.failed)
    started = time.monotonic()
    for host in hosts:  # after the pushes: off the path from a change to the hosts
        versions_prune(host=host)
    timed("prune", started)
    if deltas or compiled:
        started = time.monotonic()
        ok = {o.host for o in outcomes if o.ok}
        for version in deltas:
            host = version.host
            if host.name not in ok or not host.runs(version.content_hash):
                delta_forget(host.pk)  # refused, failed, or stopped before: compile in full
        for host in hosts:  # a full version the host confirmed: the base of the next step
            delta_base_ensure(host)
        timed("delta", started)
    if not _change_waiting(site):
        # Off the critical path: after the rollout, and only when no change waits for the lock
        # (that run stores the snapshot of its newer versions instead).
        started = time.monotonic()
        version_snapshots_store(versions=compiled)
        timed("snapshots", started)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        site.mark(SiteStatus.FAILED, "; ".join(f"{o.host}: {o.step}: {o.message}" for o in failed))
    else:
        site.mark(SiteStatus.IDLE)
    timed("total", begun)
    return outcomes
