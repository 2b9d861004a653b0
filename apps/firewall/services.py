"""Writes of the firewall app: store compiled versions, push them host by host."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.firewall.choices import PushStep
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from apps.firewall.transport import FirewallSession, FirewallUnreachable, HelperReply, session_for


@dataclass(frozen=True)
class PushOutcome:
    """How one push to one host ended."""

    host: str
    ok: bool
    step: str
    message: str = ""
    unreachable: bool = False
    skipped: bool = False


@transaction.atomic
def ruleset_version_store(
    *,
    host: FirewallHost,
    nft_text: str,
    tc_text: str,
    content_hash: str,
    counts: dict[str, int],
    compile_seconds: float,
    cause: str,
    actor: Any = None,
    snapshot_at: datetime | None = None,
) -> RuleSetVersion:
    """Keep a compiled rule set; the same content again returns the stored version (with the
    newer snapshot time: it carries every change made up to then)."""
    latest = RuleSetVersion.objects.filter(host=host).first()
    if latest is not None and latest.content_hash == content_hash:
        if snapshot_at and snapshot_at > latest.snapshot_at:
            latest.snapshot_at = snapshot_at
            latest.save(update_fields=["snapshot_at"])
        return latest
    version = RuleSetVersion.objects.create(
        host=host,
        content_hash=content_hash,
        nft_text=nft_text,
        tc_text=tc_text,
        counts=counts,
        size_bytes=len(nft_text.encode()),
        compile_seconds=compile_seconds,
        cause=cause[:500],
        actor=actor if getattr(actor, "pk", None) else None,
        snapshot_at=snapshot_at or timezone.now(),
    )
    keep = settings.PORTAL_RULESET_HISTORY
    stale = RuleSetVersion.objects.filter(host=host).values_list("pk", flat=True)[keep:]
    # Never drop what a host runs: a rollback to it must stay possible.
    RuleSetVersion.objects.filter(pk__in=list(stale)).exclude(
        pk=host.applied_version_id or 0
    ).delete()
    return version


# The push's health verdict reads the loaded version and the conntrack fill, not the softirq
# load (the periodic health collection samples that): no sampling pause in the push.
PUSH_HEALTH_SAMPLE_MS = 0


class _Push:
    """One push: every step timed and logged; failures after apply roll the host back."""

    def __init__(
        self, host: FirewallHost, version: RuleSetVersion, session: FirewallSession | None = None
    ) -> None:
        self.host, self.version = host, version
        self.session = session if session is not None else session_for(host)

    def running_tc(self) -> str | None:
        """The shaping set-up the host already runs (unchanged shaping needs no tc call)."""
        if self.host.push_status != "applied" or not self.host.applied_version_id:
            return None
        return (
            RuleSetVersion.objects.filter(pk=self.host.applied_version_id)
            .values_list("tc_text", flat=True)
            .first()
        )

    def log(self, step: str, ok: bool, message: str, started: float) -> None:
        PushLogEntry.objects.create(
            host=self.host,
            version=self.version,
            step=step,
            ok=ok,
            message=message[:4000],
            seconds=round(time.monotonic() - started, 3),
        )

    def fail(self, step: str, message: str, *, unreachable: bool = False) -> PushOutcome:
        self.host.mark_error(f"{step}: {message}", unreachable=unreachable)
        return PushOutcome(self.host.name, False, step, message, unreachable=unreachable)

    def step(
        self, session: FirewallSession, step: str, verb: str, *args: str, stdin: str | None = None
    ) -> HelperReply:
        started = time.monotonic()
        reply = session.call(verb, *args, stdin=stdin)
        self.log(step, reply.ok, "" if reply.ok else reply.message, started)
        return reply

    def rollback(self, session: FirewallSession) -> str:
        try:
            reply = self.step(session, PushStep.ROLLBACK, "rollback")
        except FirewallUnreachable as exc:
            return f"; the host reverts by itself when its confirm timer runs out ({exc})"
        if reply.ok:
            return "; rolled back to the previous rule set"
        return f"; rollback failed: {reply.message}"

    def apply(self, session: FirewallSession, text: str, mode: tuple[str, ...]) -> HelperReply:
        """Check, arm the rollback timer, load and read back version and health in one call.
        Logs the check (the helper's own timing) and the apply; a reply with "phase": "check"
        changed nothing on the host."""
        started = time.monotonic()
        reply = session.call(
            "apply",
            "--confirm-within",
            str(settings.PORTAL_FIREWALL_CONFIRM_WITHIN),
            *mode,
            "--version",
            f"v{self.version.pk}",
            "--health-sample-ms",
            str(PUSH_HEALTH_SAMPLE_MS),
            stdin=text,
        )
        if not reply.ok and reply.data.get("phase") == "check":
            self.log(PushStep.CHECK, False, reply.message, started)
            return reply
        checked = reply.data.get("check_seconds")
        check_seconds = float(checked or 0)
        health_seconds = float((reply.data.get("health") or {}).get("collect_seconds") or 0)
        if checked is not None:
            self.log(PushStep.CHECK, True, "", time.monotonic() - check_seconds)
        self.log(
            PushStep.APPLY,
            reply.ok,
            "" if reply.ok else reply.message,
            started + check_seconds + health_seconds,
        )
        return reply

    def run(self) -> PushOutcome:
        version = self.version
        started = time.monotonic()
        try:
            session = self.session.__enter__()
        except FirewallUnreachable as exc:
            self.log(PushStep.CONNECT, False, str(exc), started)
            return self.fail(PushStep.CONNECT, str(exc), unreachable=True)
        self.log(PushStep.CONNECT, True, "", started)
        applied = False
        try:
            reply = None
            increment = increment_for(host=self.host, version=version)
            if increment is not None:
                # The host holds the previous version: send only the element changes.
                reply = self.apply(session, increment, ("--incremental",))
            if reply is None or reply.data.get("phase") == "check":
                reply = self.apply(session, version.nft_text, ())
            if not reply.ok:
                if reply.data.get("phase") == "check":
                    message = f"the host refused the rule set: {reply.message}"
                    return self.fail(PushStep.CHECK, message)
                return self.fail(PushStep.APPLY, reply.message)
            applied = True
            health = reply.data.get("health")
            loaded = (reply.data.get("loaded") or {}).get("version") or reply.data.get("version")
            if loaded != version.content_hash:
                message = f"the host reports version {loaded!r}, expected {version.content_hash}"
                self.log(PushStep.VERIFY, False, message, time.monotonic())
                return self.fail(PushStep.VERIFY, message + self.rollback(session))
            if version.tc_text.strip() and version.tc_text != self.running_tc():
                reply = self.step(session, PushStep.SHAPING, "tc-apply", stdin=version.tc_text)
                if not reply.ok:
                    return self.fail(PushStep.SHAPING, reply.message + self.rollback(session))
                health = None  # taken before the shaping changed: take it again
            if health is None:
                reply = self.step(
                    session, PushStep.HEALTH, "health", "--sample-ms", str(PUSH_HEALTH_SAMPLE_MS)
                )
            else:
                reply = HelperReply(0, {"ok": True, **health})
                self.log(
                    PushStep.HEALTH,
                    True,
                    "",
                    time.monotonic() - float(health.get("collect_seconds") or 0),
                )
            problem = health_problem(reply, expected=version.content_hash)
            if problem:
                return self.fail(PushStep.HEALTH, problem + self.rollback(session))
            reply = self.step(session, PushStep.CONFIRM, "confirm")
            if not reply.ok:
                return self.fail(PushStep.CONFIRM, reply.message)
        except FirewallUnreachable as exc:
            if not applied:
                return self.fail(PushStep.CONNECT, f"connection lost: {exc}", unreachable=True)
            # Lost after the apply: the new rule set may be what cut the connection, so it must
            # not reach the next host. This one reverts by itself (commit-confirmed).
            within = settings.PORTAL_FIREWALL_CONFIRM_WITHIN
            return self.fail(
                PushStep.CONNECT,
                f"connection lost after the apply: {exc}; the host reverts by itself within "
                f"{within} s unless confirmed, and the rollout stops here",
            )
        finally:
            session.__exit__(None, None, None)
        self.host.mark_applied(version)
        return PushOutcome(self.host.name, True, PushStep.CONFIRM)


def health_problem(reply: HelperReply, *, expected: str) -> str:
    """Why a host is not healthy after an apply, or "" when it is."""
    if not reply.ok:
        return f"health check failed: {reply.message}"
    data = reply.data
    if data.get("version") != expected:
        return f"health: loaded version {data.get('version')!r}, expected {expected}"
    conntrack = data.get("conntrack") or {}
    limit = settings.PORTAL_HEALTH_CONNTRACK_MAX_RATIO
    if conntrack.get("ratio") is not None and conntrack["ratio"] > limit:
        return f"health: conntrack table {conntrack['ratio']:.0%} full (limit {limit:.0%})"
    return ""


def ruleset_push(
    *, host: FirewallHost, version: RuleSetVersion, session: FirewallSession | None = None
) -> PushOutcome:
    """Check, arm the rollback timer and apply, verify the version and health (one round trip),
    then confirm (a second one); a failure after the apply rolls the host back. `session`: one
    already started (not entered) by the caller; the push closes it."""
    return _Push(host, version, session).run()


def ruleset_rollout(*, versions: Iterable[RuleSetVersion]) -> list[PushOutcome]:
    """Push host by host in rollout order; a refused or unhealthy rule set stops the rollout,
    so it never reaches the next host. An unreachable host is skipped: it stays pending and
    gets the newest version when it returns."""
    outcomes: list[PushOutcome] = []
    ordered = sorted(versions, key=lambda v: (v.host.rollout_order, v.host.name))
    due = [
        v
        for v in ordered
        if v.host.enabled
        and not (v.host.applied_checksum == v.content_hash and v.host.push_status == "applied")
    ]
    # Connect to every host due at once, on one loop: the later hosts' handshakes run while the
    # first host is pushed, so their turn starts with a connection. Connecting runs no helper
    # verb; a host whose turn never comes sees its connection closed, nothing else.
    loop = asyncio.new_event_loop()
    sessions = {v.pk: session_for(v.host, loop=loop).start() for v in due}
    try:
        for index, version in enumerate(ordered):
            host = version.host
            if not host.enabled:
                continue
            if version.pk not in sessions:
                outcomes.append(PushOutcome(host.name, True, "", "already applied", skipped=True))
                continue
            outcome = ruleset_push(host=host, version=version, session=sessions[version.pk])
            outcomes.append(outcome)
            if not outcome.ok and not outcome.unreachable:
                for later in ordered[index + 1 :]:
                    later.host.mark_pending()
                break
    finally:
        for session in sessions.values():
            session.close()
        loop.close()
    return outcomes


def host_drift_repair(*, host: FirewallHost) -> PushOutcome | None:
    """Push the newest version again to a host that runs something else (drift)."""
    latest = RuleSetVersion.objects.filter(host=host).first()
    if latest is None:
        return None
    return ruleset_push(host=host, version=latest)


# The newest compiled rule sets of this process per host (content hash -> Compiled): the base
# of incremental transactions without recompiling anything. A fresh worker falls back to the
# stored snapshot of the version a host runs, or to the full rule set.
_COMPILED: dict[int, dict[str, Any]] = {}
_COMPILED_KEPT = 3


def _compiled_remember(host_id: int, content_hash: str, compiled: Any, snapshot: Any) -> None:
    entries = _COMPILED.setdefault(host_id, {})
    entries.pop(content_hash, None)
    entries[content_hash] = (compiled, snapshot)
    while len(entries) > _COMPILED_KEPT:
        entries.pop(next(iter(entries)))


def compiled_snapshot(*, host_id: int, content_hash: str) -> Any:
    """The Snapshot this process compiled into `content_hash` for the host, if it still has it."""
    entry = _COMPILED.get(host_id, {}).get(content_hash)
    return entry[1] if entry else None


def increment_for(*, host: FirewallHost, version: RuleSetVersion) -> str | None:
    """The incremental transaction from what `host` runs to `version`, or None (send it all)."""
    from workers.ruleset import diff
    from workers.ruleset.diff import diff_stored

    if host.push_status != "applied" or not host.applied_checksum:
        return None
    if host.applied_checksum == version.content_hash:
        return None
    entries = _COMPILED.get(host.pk, {})
    new = entries.get(version.content_hash)
    if new is None:
        return None
    old = entries.get(host.applied_checksum)
    if old is not None:
        step = diff(old[0], new[0])
    else:
        previous = (
            RuleSetVersion.objects.filter(pk=host.applied_version_id)
            .only("content_hash", "snapshot_json")
            .first()
        )
        text = previous.snapshot_text() if previous else None
        if not text or previous.content_hash != host.applied_checksum:
            return None
        step = diff_stored(text, previous.content_hash, new[0])
    return step.nft if step is not None else None


class CompileError(Exception):
    """The database cannot be compiled (an inconsistent row); nothing was pushed."""


def ruleset_compile(*, cause: str, actor: Any = None) -> list[RuleSetVersion]:
    """Compile the current database for every enabled host and store the versions."""
    from apps.firewall.selectors import firewall_snapshot_build, snapshot_data_read
    from workers.ruleset import SnapshotError, compile_snapshot

    hosts = list(FirewallHost.objects.filter(enabled=True))
    try:
        data = snapshot_data_read()
    except SnapshotError as exc:
        for host in hosts:
            host.mark_error(f"compile: {exc}")
        raise CompileError(str(exc)) from exc
    versions = []
    for host in hosts:
        started = time.monotonic()
        try:
            snapshot = firewall_snapshot_build(host=host, data=data)
            compiled = compile_snapshot(snapshot)
        except SnapshotError as exc:
            host.mark_error(f"compile: {exc}")
            raise CompileError(f"{host.name}: {exc}") from exc
        versions.append(
            ruleset_version_store(
                host=host,
                nft_text=compiled.nft,
                tc_text=compiled.tc,
                content_hash=compiled.content_hash,
                counts=compiled.counts,
                compile_seconds=round(time.monotonic() - started, 4),
                cause=cause,
                actor=actor,
                snapshot_at=data.taken_at,
            )
        )
        _compiled_remember(host.pk, compiled.content_hash, compiled, snapshot)
    return versions


@transaction.atomic
def firewall_push_now(*, actor: Any) -> None:
    """Staff ask for a compile and rollout now (audited; runs in the worker)."""
    from apps.audit.services import audit_record
    from apps.firewall.pipeline import firewall_change_request

    for host in FirewallHost.objects.filter(enabled=True):
        audit_record(actor=actor, action="firewall.push_now", obj=host)
    cause = f"push now (by {actor.get_username()})"
    transaction.on_commit(lambda: firewall_change_request(cause=cause, force=True))


@transaction.atomic
def host_rollback_request(*, host: FirewallHost, version: RuleSetVersion, actor: Any) -> None:
    """Staff ask to put `version` back on `host` (audited; the worker pushes it under the lock).
    The next change of the network compiles and pushes the newest state again."""
    from apps.audit.services import audit_record
    from workers.firewall import host_rollback as host_rollback_task

    if version.host_id != host.pk:
        raise ValueError("that version belongs to another host")
    audit_record(
        actor=actor,
        action="firewall.rollback",
        obj=host,
        changes={"version": [host.applied_version_id, version.pk]},
    )
    transaction.on_commit(lambda: host_rollback_task.delay(host.pk, version.pk))


def host_rollback(*, host: FirewallHost, version: RuleSetVersion) -> PushOutcome:
    """Push an older stored version to one host (the worker calls this under the lock)."""
    return ruleset_push(host=host, version=version)


SNAPSHOTS_KEPT = 5


def version_snapshots_store(*, versions: Iterable[RuleSetVersion]) -> None:
    """Keep each version's compiler input (after the rollout: off the critical path), taken
    from this process's compile cache, and only for the newest few versions of a host."""
    import zlib

    for version in versions:
        snapshot = compiled_snapshot(host_id=version.host_id, content_hash=version.content_hash)
        if snapshot is None or version.snapshot_json:
            continue
        data = zlib.compress(snapshot.to_json().encode("ascii"), 6)
        RuleSetVersion.objects.filter(pk=version.pk).update(snapshot_json=data)
        older = (
            RuleSetVersion.objects.filter(host_id=version.host_id, snapshot_json__isnull=False)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[SNAPSHOTS_KEPT:]
        )
        RuleSetVersion.objects.filter(pk__in=list(older)).update(snapshot_json=None)
