"""Compile and roll out: store compiled versions, push them host by host, roll back."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.firewall.choices import PushStep, SiteStatus
from apps.firewall.extensions import Roles, firewall_extensions
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion, Site
from apps.firewall.pipeline import scheduled_key
from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
from apps.firewall.transport import (
    AgentMismatch,
    FirewallSession,
    FirewallUnreachable,
    HelperReply,
    pooled_session_for,
)
from apps.infra.redis import redis_client
from workers.ruleset import SnapshotError, compile_bundle, diff
from workers.ruleset.bundle import increment_from_stored

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class PushOutcome:
    """How one push to one host ended."""

    host: str
    ok: bool
    step: str
    message: str = ""
    unreachable: bool = False
    skipped: bool = False
    pinned_to: int | None = None  # skipped because staff pinned the host to this version


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
    actor: User | None = None,
    snapshot_at: datetime | None = None,
    files: dict[str, str] | None = None,
    artefact_hashes: dict[str, str] | None = None,
    prune: bool = True,
    texts_later: bool = False,
) -> RuleSetVersion:
    """Keep a compiled bundle; the same content again returns the stored version (with the
    newer snapshot time: it carries every change made up to then). `prune=False` leaves the
    history's trimming to the caller (`versions_prune`, after a rollout). `texts_later`: the
    row is stored without its texts (about 16 MB at 20,000 members, 0.2 s to write) and
    marked pending; the returned object holds them and `texts_unwritten` is True until the
    caller's `version_texts_write`."""
    latest = (
        RuleSetVersion.objects.filter(host=host)
        .only("content_hash", "snapshot_at", "texts_pending")
        .first()
    )
    if latest is not None and latest.content_hash == content_hash:
        if snapshot_at and snapshot_at > latest.snapshot_at:
            latest.snapshot_at = snapshot_at
            latest.save(update_fields=["snapshot_at"])
        if latest.texts_pending:  # its worker stopped before writing them: write them now
            latest.nft_text, latest.tc_text, latest.files = nft_text, tc_text, files or {}
            version_texts_write(latest)
        return latest
    version = RuleSetVersion.objects.create(
        host=host,
        content_hash=content_hash,
        nft_text="" if texts_later else nft_text,
        tc_text="" if texts_later else tc_text,
        files={} if texts_later else files or {},
        texts_pending=texts_later,
        artefact_hashes=artefact_hashes or {},
        counts=counts,
        size_bytes=len(nft_text.encode()) + sum(len(f.encode()) for f in (files or {}).values()),
        compile_seconds=compile_seconds,
        cause=cause[:500],
        actor=actor if getattr(actor, "pk", None) else None,
        snapshot_at=snapshot_at or timezone.now(),
    )
    if texts_later:
        version.nft_text, version.tc_text, version.files = nft_text, tc_text, files or {}
        version.texts_pending = False  # this object holds them (the row until written)
        version.texts_unwritten = True  # type: ignore[attr-defined]
    if prune:
        versions_prune(host=host)
    return version


def version_texts_write(version: RuleSetVersion) -> None:
    """Store the texts of a version kept with `texts_later` (or repair one left pending)."""
    RuleSetVersion.objects.filter(pk=version.pk).update(
        nft_text=version.nft_text,
        tc_text=version.tc_text,
        files=version.files,
        texts_pending=False,
    )
    version.texts_pending = False
    version.texts_unwritten = False  # type: ignore[attr-defined]


class _TextsWriter:
    """Writes the texts of a rollout's new versions beside its pushes: in a thread with its
    own database connection (the row is committed already), or at once inside a transaction
    (where another connection would not see the row)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.failed: list[str] = []
        self.started: set[int] = set()

    def start(self, version: RuleSetVersion) -> None:
        from django.db import connection

        if not getattr(version, "texts_unwritten", False) or version.pk in self.started:
            return
        self.started.add(version.pk)
        if connection.in_atomic_block:
            version_texts_write(version)
            return

        def work() -> None:
            try:
                version_texts_write(version)
            except Exception as exc:  # the row stays pending: it is never pushed
                self.failed.append(f"#{version.pk}: {exc}")
            finally:
                connection.close()

        thread = threading.Thread(target=work, name="version-texts", daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=120)
        self.threads = []


def versions_prune(*, host: FirewallHost) -> None:
    """Keep the newest `PORTAL_RULESET_HISTORY` versions of a host (deleting one costs about
    half a second at 20,000 members: its 16 MB of text; a rollout does it after its pushes)."""
    keep = settings.PORTAL_RULESET_HISTORY
    stale = RuleSetVersion.objects.filter(host=host).values_list("pk", flat=True)[keep:]
    # Never drop what a host runs or is pinned to: a rollback to it must stay possible.
    held = FirewallHost.objects.filter(pk=host.pk).values_list(
        "applied_version_id", "pinned_version_id"
    )
    kept = [pk for row in held for pk in row if pk] + [
        pk for pk in (host.applied_version_id, host.pinned_version_id) if pk
    ]
    RuleSetVersion.objects.filter(pk__in=list(stale)).exclude(pk__in=kept).delete()


# The push's health verdict reads the loaded version and the conntrack fill, not the softirq
# load (the periodic health collection samples that): no sampling pause in the push.
PUSH_HEALTH_SAMPLE_MS = 0


class _Push:
    """One push of one bundle to one host: every step timed and logged. The helper checks every
    artefact, arms one rollback point for all of them, applies, reads back the content digest
    and health in one round trip (`apply-bundle`); the portal then confirms. A failure after
    the apply rolls the whole host back."""

    def __init__(
        self, host: FirewallHost, version: RuleSetVersion, session: FirewallSession | None = None
    ) -> None:
        self.host, self.version = host, version
        self.session = session if session is not None else pooled_session_for(host)
        self.during_ran = False

    def running(self) -> RuleSetVersion | None:
        """The version the host confirmed (unchanged artefacts need not travel again)."""
        if not self.host.holds_confirmed:
            return None
        return (
            RuleSetVersion.objects.filter(pk=self.host.applied_version_id)
            .only("tc_text", "artefact_hashes", "content_hash")
            .first()
        )

    def payload(self, *, increment: Any) -> str:
        """The bundle as the helper reads it: an increment of nft and tc when the host holds the
        previous version, else nft in full; tc and files only where they changed."""
        version, running = self.version, self.running()
        artefacts: dict[str, dict[str, str]] = {}
        if increment is not None:
            artefacts["nft"] = {"mode": "increment", "text": increment.nft}
            if increment.tc:
                artefacts["tc"] = {"mode": "increment", "text": increment.tc}
        else:
            artefacts["nft"] = {"mode": "replace", "text": version.nft_text}
            if version.tc_text.strip() and (running is None or running.tc_text != version.tc_text):
                artefacts["tc"] = {"mode": "replace", "text": version.tc_text}
        before = running.artefact_hashes if running is not None else {}
        for name, text in sorted(version.files.items()):
            if running is None or before.get(name) != version.artefact_hashes.get(name):
                artefacts[name] = {"mode": "replace", "text": text}
        return json.dumps(
            {"format": 1, "version": version.content_hash, "artefacts": artefacts},
            separators=(",", ":"),
        )

    def log(
        self, step: str, ok: bool, message: str, started: float, ended: float | None = None
    ) -> None:
        PushLogEntry.objects.create(
            host=self.host,
            version=self.version,
            step=step,
            ok=ok,
            message=message[:4000],
            seconds=round((ended or time.monotonic()) - started, 3),
        )

    def fail(self, step: str, message: str, *, unreachable: bool = False) -> PushOutcome:
        self.host.mark_error(f"{step}: {message}", unreachable=unreachable)
        return PushOutcome(self.host.name, False, step, message, unreachable=unreachable)

    def step(self, session: FirewallSession, step: str, verb: str, *args: str) -> HelperReply:
        started = time.monotonic()
        reply = session.call(verb, *args)
        self.log(step, reply.ok, "" if reply.ok else reply.message, started)
        return reply

    def rollback(self, session: FirewallSession) -> str:
        try:
            reply = self.step(session, PushStep.ROLLBACK, "rollback")
        except FirewallUnreachable as exc:
            return f"; the host reverts by itself when its confirm timer runs out ({exc})"
        if reply.ok:
            return "; the host restored its previous bundle"
        return f"; rollback failed: {reply.message}"

    def apply(
        self, session: FirewallSession, increment: Any, during: Callable[[], None] | None = None
    ) -> HelperReply:
        """Check every artefact, arm the rollback point, apply, read back digest and health in
        one call. Logs the check (the helper's own timing) and the apply; a reply with
        "phase": "check" changed nothing on the host. `during` runs while the host works (on
        a background loop: the next host's compile)."""
        started = time.monotonic()
        pending = session.call_start(
            "apply-bundle",
            "--confirm-within",
            str(settings.PORTAL_FIREWALL_CONFIRM_WITHIN),
            "--health-sample-ms",
            str(PUSH_HEALTH_SAMPLE_MS),
            stdin=self.payload(increment=increment),
        )
        if during is not None:
            during()
        reply = pending.result()
        answered = pending.answered_at
        if not reply.ok and reply.data.get("phase") == "check":
            self.log(PushStep.CHECK, False, reply.message, started, answered)
            return reply
        checked = reply.data.get("check_seconds")
        check_seconds = float(checked or 0)
        health_seconds = float((reply.data.get("health") or {}).get("collect_seconds") or 0)
        if checked is not None:
            self.log(PushStep.CHECK, True, "", time.monotonic() - check_seconds)
        message = reply.message
        if not reply.ok and reply.data.get("rolled_back"):
            message += "; the host restored its previous bundle"
        self.log(
            PushStep.APPLY,
            reply.ok,
            "" if reply.ok else message,
            started + check_seconds + health_seconds,
            answered,
        )
        return reply

    def run(self, during: Callable[[], None] | None = None) -> PushOutcome:
        """Push the bundle; `during` runs once, while the host applies (or right away when
        nothing is applied)."""
        try:
            return self._run(during)
        finally:
            if during is not None and not self.during_ran:
                during()

    def _run(self, during: Callable[[], None] | None) -> PushOutcome:
        def once() -> None:
            if during is not None and not self.during_ran:
                self.during_ran = True
                during()

        version = self.version
        if version.texts_pending:
            message = (
                f"version #{version.pk} was never stored completely (its worker stopped before "
                "writing the texts): nothing was sent"
            )
            self.session.close()
            return self.fail(PushStep.CHECK, message)
        started = time.monotonic()
        try:
            session = self.session.__enter__()
        except FirewallUnreachable as exc:
            self.log(PushStep.CONNECT, False, str(exc), started)
            # An agent of another protocol answered: reachable, but it must be updated.
            return self.fail(
                PushStep.CONNECT, str(exc), unreachable=not isinstance(exc, AgentMismatch)
            )
        self.log(PushStep.CONNECT, True, "", started)
        applied = False
        try:
            reply = None
            increment = increment_for(host=self.host, version=version)
            if increment is not None:
                # The host holds the previous version: send only the element changes.
                reply = self.apply(session, increment, once)
            if reply is None or reply.data.get("phase") == "check":
                reply = self.apply(session, None, once)
            if not reply.ok:
                if reply.data.get("phase") == "check":
                    message = f"the host refused the bundle: {reply.message}"
                    return self.fail(PushStep.CHECK, message)
                if reply.data.get("rolled_back"):
                    message = f"{reply.message}; the host restored its previous bundle"
                    return self.fail(PushStep.APPLY, message)
                return self.fail(PushStep.APPLY, reply.message + self.rollback(session))
            applied = True
            loaded = reply.data.get("version")
            if loaded != version.content_hash:
                message = f"the host reports version {loaded!r}, expected {version.content_hash}"
                self.log(PushStep.VERIFY, False, message, time.monotonic())
                return self.fail(PushStep.VERIFY, message + self.rollback(session))
            digest = reply.data.get("digest") or {}
            health = reply.data.get("health") or {}
            self.log(
                PushStep.HEALTH,
                True,
                "",
                time.monotonic() - float(health.get("collect_seconds") or 0),
            )
            problem = health_problem(
                HelperReply(0, {"ok": True, **health, "version": loaded}),
                expected=version.content_hash,
            )
            if problem:
                return self.fail(PushStep.HEALTH, problem + self.rollback(session))
            reply = self.step(session, PushStep.CONFIRM, "confirm")
            if not reply.ok:
                return self.fail(PushStep.CONFIRM, reply.message)
        except FirewallUnreachable as exc:
            if not applied:
                return self.fail(PushStep.CONNECT, f"connection lost: {exc}", unreachable=True)
            # Lost after the apply: the new bundle may be what cut the connection, so it must
            # not reach the next host. This one reverts by itself (commit-confirmed).
            within = settings.PORTAL_FIREWALL_CONFIRM_WITHIN
            return self.fail(
                PushStep.CONNECT,
                f"connection lost after the apply: {exc}; the host reverts by itself within "
                f"{within} s unless confirmed, and the rollout stops here",
            )
        finally:
            session.__exit__(None, None, None)
        self.host.mark_applied(version, digest=digest)
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
    ha = data.get("ha") or {}
    for daemon in ("keepalived", "conntrackd"):
        if ha and not (ha.get(daemon) or {}).get("running", True):
            return f"health: {daemon} is not running after the apply"
    return ""


def backup_first(hosts: list[FirewallHost]) -> list[FirewallHost]:
    """Rollout order within a site: the hosts of a pair that hold fewer primary roles first
    (judged from their newest health sample), the IPv4 primary last, then rollout order. A
    bundle the backup refuses or that leaves it unhealthy never reaches the primary."""
    paired = [h for h in hosts if h.sync_interface]
    roles: dict[int, Roles] = {}
    for extension in firewall_extensions():  # health: the roles of the newest samples
        roles.update(extension.host_roles(hosts=paired) if paired else {})

    def key(host: FirewallHost) -> tuple:
        mine = roles.get(host.pk, {})
        masters = sum(1 for state in mine.values() if state == "MASTER")
        return (masters, mine.get("ipv4") == "MASTER", host.rollout_order, host.name)

    return sorted(hosts, key=key)


def ruleset_push(
    *,
    host: FirewallHost,
    version: RuleSetVersion,
    session: FirewallSession | None = None,
    during: Callable[[], None] | None = None,
) -> PushOutcome:
    """Check, arm the rollback timer and apply, verify the version and health (one round trip),
    then confirm (a second one); a failure after the apply rolls the host back. `session`: one
    already started (not entered) by the caller; the push closes it. `during` runs once while
    the host applies (always, also when the push fails first)."""
    return _Push(host, version, session).run(during)


def ruleset_rollout(*, versions: Iterable[RuleSetVersion]) -> list[PushOutcome]:
    """Push compiled versions host by host in rollout order (the hosts of one site); see
    `_rollout`."""
    by_host = {v.host_id: v for v in versions}
    hosts = [v.host for v in by_host.values()]
    return _rollout(hosts, lambda host: by_host[host.pk])


def _rollout(
    hosts: Iterable[FirewallHost],
    version_for: Callable[[FirewallHost], RuleSetVersion],
    *,
    sessions: dict[int, FirewallSession] | None = None,
    during_last: Callable[[], None] | None = None,
) -> list[PushOutcome]:
    """Push host by host in rollout order; `version_for(host)` gives (or compiles, just in time)
    what the host should run: the next host's bundle compiles while the current one applies,
    and `during_last` runs while the last one applies.
    A refused or unhealthy bundle stops the rollout: it never reaches the next host. An
    unreachable host is skipped: it stays pending and gets the newest version when it returns.
    A pinned host is skipped and says so: staff hold it on the version they put back.
    `sessions`: connections the caller started already."""
    outcomes: list[PushOutcome] = []
    ordered = backup_first([h for h in hosts if h.enabled])
    # Connect to every host that may be due at once (or take its open connection from this
    # process's pool), on the pool's loop in its own thread: handshakes run while this thread
    # reads and compiles. Connecting runs no helper verb.
    sessions = dict(sessions or {})
    for h in ordered:
        if not h.is_pinned and h.pk not in sessions:
            sessions[h.pk] = pooled_session_for(h).start()
    prepared: dict[int, tuple[RuleSetVersion | None, Exception | None]] = {}

    def prepare(host: FirewallHost) -> None:
        if host.pk not in prepared:
            try:
                prepared[host.pk] = (version_for(host), None)
            except Exception as exc:  # raised at that host's turn, not during another's push
                prepared[host.pk] = (None, exc)

    def version_of(host: FirewallHost) -> RuleSetVersion:
        prepare(host)
        version, error = prepared[host.pk]
        if version is None:
            raise error or CompileError(f"{host.name}: nothing compiled")
        return version

    try:
        for index, host in enumerate(ordered):
            if host.is_pinned:
                message = f"pinned to #{host.pinned_version_id}: automatic pushes skip it"
                outcomes.append(
                    PushOutcome(
                        host.name, True, "", message, skipped=True, pinned_to=host.pinned_version_id
                    )
                )
                continue
            version = version_of(host)
            if host.runs(version.content_hash):
                outcomes.append(PushOutcome(host.name, True, "", "already applied", skipped=True))
                continue
            later = next((h for h in ordered[index + 1 :] if not h.is_pinned), None)
            outcome = ruleset_push(
                host=host,
                version=version,
                session=sessions.pop(host.pk),
                during=(lambda h=later: prepare(h)) if later is not None else during_last,
            )
            outcomes.append(outcome)
            if not outcome.ok and not outcome.unreachable:
                for later_host in ordered[index + 1 :]:
                    if not later_host.is_pinned:
                        later_host.mark_pending()
                break
    finally:
        for session in sessions.values():
            session.close()
    return outcomes


def host_drift_repair(*, host: FirewallHost) -> PushOutcome | None:
    """Push in full what a drifted host should run: the version it is pinned to, or else its
    newest version (what it runs is unknown, so no increment)."""
    version = host.pinned_version or RuleSetVersion.objects.filter(host=host).first()
    if version is None:
        return None
    host.mark_pending()  # no confirmed base any more: the push sends everything
    return ruleset_push(host=host, version=version)


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


def compiled_warm(*, connect: bool) -> list[str]:
    """Read the database and compile every enabled host into this process's caches (members,
    elements, compiled bundles) and, with `connect`, open its SSH connection (kept open for the
    first rollout); returns the hosts whose running bundle is now the base of the next
    increment."""

    hosts = list(FirewallHost.objects.filter(enabled=True).select_related("site"))
    if not hosts:
        return []
    # The hosts' SSH connections open meanwhile and stay open for the first rollout.
    sessions = [pooled_session_for(host).start() for host in hosts] if connect else []
    try:
        data = snapshot_data_read()
        ready = []
        for host in hosts:
            snapshot = firewall_snapshot_build(host=host, data=data)
            bundle = compile_bundle(snapshot)
            _compiled_remember(host.pk, bundle.content_hash, bundle.compiled, snapshot)
            if host.runs(bundle.content_hash):
                ready.append(host.name)
    finally:
        for session in sessions:
            with contextlib.suppress(FirewallUnreachable):  # a host that is down: connect later
                session.__enter__()
            session.close()
    return ready


def compiled_snapshot(*, host_id: int, content_hash: str) -> Any:
    """The Snapshot this process compiled into `content_hash` for the host, if it still has it."""
    entry = _COMPILED.get(host_id, {}).get(content_hash)
    return entry[1] if entry else None


def increment_for(*, host: FirewallHost, version: RuleSetVersion) -> Any:
    """The increment (`workers.ruleset.Incremental`: nft and tc) from what `host` runs to
    `version`, or None (send the bundle in full)."""

    if not host.holds_confirmed or host.runs(version.content_hash):
        return None
    entries = _COMPILED.get(host.pk, {})
    new = entries.get(version.content_hash)
    if new is None:
        return None
    old = entries.get(host.applied_checksum)
    if old is None:
        previous = (
            RuleSetVersion.objects.filter(pk=host.applied_version_id)
            .only("content_hash", "snapshot_json")
            .first()
        )
        text = previous.snapshot_text() if previous else None
        if not text or previous.content_hash != host.applied_checksum:
            return None
        return increment_from_stored(text, previous.content_hash, new[0])
    return diff(old[0], new[0])


class CompileError(Exception):
    """The database cannot be compiled (an inconsistent row); nothing was pushed."""


def ruleset_compile(
    *, site: Site | None = None, cause: str, actor: User | None = None
) -> list[RuleSetVersion]:
    """Compile the current database for every enabled host of `site` (None: of every site) and
    store the versions."""
    hosts = FirewallHost.objects.filter(enabled=True).select_related("site")
    hosts = list(hosts.filter(site=site) if site is not None else hosts)
    data = _snapshot_data(hosts)
    return [host_compile(host=host, data=data, cause=cause, actor=actor) for host in hosts]


def _snapshot_data(hosts: list[FirewallHost]) -> Any:
    """The database read shared by every host's compile (CompileError names a bad row)."""

    try:
        return snapshot_data_read()
    except SnapshotError as exc:
        for host in hosts:
            host.mark_error(f"compile: {exc}")
        raise CompileError(str(exc)) from exc


def host_compile(
    *,
    host: FirewallHost,
    data: Any,
    cause: str,
    actor: User | None = None,
    prune: bool = True,
    texts_later: bool = False,
) -> RuleSetVersion:
    """Compile one host's bundle from a database read and store it as a version."""

    started = time.monotonic()
    try:
        snapshot = firewall_snapshot_build(host=host, data=data)
        bundle = compile_bundle(snapshot)
    except SnapshotError as exc:
        host.mark_error(f"compile: {exc}")
        raise CompileError(f"{host.name}: {exc}") from exc
    compiled = bundle.compiled
    version = ruleset_version_store(
        host=host,
        nft_text=compiled.nft,
        tc_text=compiled.tc,
        files=dict(bundle.files),
        artefact_hashes=bundle.artefact_hashes,
        content_hash=bundle.content_hash,
        counts=compiled.counts,
        compile_seconds=round(time.monotonic() - started, 4),
        cause=cause,
        actor=actor,
        snapshot_at=data.taken_at,
        prune=prune,
        texts_later=texts_later,
    )
    _compiled_remember(host.pk, bundle.content_hash, compiled, snapshot)
    version.host = host  # the caller's row (pinned, confirmed) without another query
    return version


def _change_waiting(site: Site) -> bool:
    return bool(redis_client().exists(scheduled_key(site.pk)))


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
    texts = _TextsWriter()

    def texts_start() -> None:
        for version in compiled:
            texts.start(version)

    def version_for(host: FirewallHost) -> RuleSetVersion:
        started = time.monotonic()
        version = host_compile(host=host, data=data, cause=cause, prune=False, texts_later=True)
        compiled.append(version)
        timed(f"compile {host.name}", started)
        return version

    # The hosts' handshakes (if their connections are not open already) run while the
    # database is read.
    sessions = {h.pk: pooled_session_for(h).start() for h in hosts if not h.is_pinned}
    try:
        started = time.monotonic()
        data = _snapshot_data(hosts)
        timed("read", started)
        started = time.monotonic()
        outcomes = _rollout(hosts, version_for, sessions=sessions, during_last=texts_start)
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
        if host.pk not in {v.host_id for v in compiled}:
            version_for(host)
    texts_start()
    texts.join()
    if texts.failed:
        log.warning("firewall.version_texts_failed", site=site.name, failed=texts.failed)
    started = time.monotonic()
    for host in hosts:  # after the pushes: off the path from a change to the hosts
        versions_prune(host=host)
    timed("prune", started)
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


def host_rollback(*, host: FirewallHost) -> PushOutcome | None:
    """Push the version a host is pinned to (the worker calls this under the site's lock)."""
    if host.pinned_version is None:
        return None
    return ruleset_push(host=host, version=host.pinned_version)


SNAPSHOTS_KEPT = 5


def version_snapshots_store(*, versions: Iterable[RuleSetVersion]) -> None:
    """Keep each version's compiler input (after the rollout: off the critical path), taken
    from this process's compile cache, and only for the newest few versions of a host."""
    import zlib

    for version in versions:
        snapshot = compiled_snapshot(host_id=version.host_id, content_hash=version.content_hash)
        if snapshot is None or version.snapshot_json:
            continue
        data = zlib.compress(snapshot.to_json().encode("ascii"), 1)  # fast; size matters less
        RuleSetVersion.objects.filter(pk=version.pk).update(snapshot_json=data)
        older = (
            RuleSetVersion.objects.filter(host_id=version.host_id, snapshot_json__isnull=False)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[SNAPSHOTS_KEPT:]
        )
        RuleSetVersion.objects.filter(pk__in=list(older)).update(snapshot_json=None)
