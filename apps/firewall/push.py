"""One push of one bundle to one host: the state machine connect -> check -> apply -> verify ->
health -> confirm, each step timed and logged, a failure after the apply rolled back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from apps.firewall.choices import PushStep
from apps.firewall.compiled import increment_for
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from apps.firewall.transport import (
    AgentMismatch,
    FirewallSession,
    FirewallUnreachable,
    HelperReply,
    pooled_session_for,
)
from workers import ruleset as rs


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


# The push's health verdict reads the loaded version and the conntrack fill, not the softirq
# load (the periodic health collection samples that): no sampling pause in the push.
PUSH_HEALTH_SAMPLE_MS = 0
ALREADY_RUNS = "already runs it: its digest matches what it confirmed"


class Push:
    """One push of one bundle to one host: every step timed and logged. The helper checks every
    artefact, arms one rollback point for all of them, applies, reads back the content digest
    and health in one round trip (`apply-bundle`); the portal then confirms. A failure after
    the apply rolls the whole host back."""

    def __init__(
        self,
        host: FirewallHost,
        version: RuleSetVersion,
        session: FirewallSession | None = None,
        only: set[str] | None = None,
    ) -> None:
        self.host, self.version = host, version
        self.only = only  # a drift repair: just these artefacts, each in full
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

    def payload(self, *, increment: rs.Incremental | None) -> str:
        """The bundle as the helper reads it: an increment of nft and tc when the host holds the
        previous version, else nft in full; tc and files only where they changed."""
        version, running = self.version, self.running()
        artefacts: dict[str, dict[str, str]] = {}
        if (
            increment is None
            and self.only is not None
            and self.only <= {"nft", "tc", *version.files}
        ):
            return self.payload_of(self.only)
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

    def payload_of(self, names: set[str]) -> str:
        """The bundle of just the named artefacts of the version, each in full (a drift repair
        of the host that runs this version: what did not drift is not touched)."""
        version = self.version
        artefacts: dict[str, dict[str, str]] = {}
        for name in sorted(names):
            if name == "nft":
                artefacts["nft"] = {"mode": "replace", "text": version.nft_text}
            elif name == "tc":  # also empty: shaping added by hand is dropped
                artefacts["tc"] = {"mode": "replace", "text": version.tc_text}
            elif name in version.files:
                artefacts[name] = {"mode": "replace", "text": version.files[name]}
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

    def runs_already(self, session: FirewallSession) -> dict | None:
        """The digest of the host when it runs this very bundle, confirmed, and its content is
        what it read back after applying it (no drift); else None. Asked only before a full
        push to a host the portal does not know to run a confirmed version (a new database,
        `make run` again over a running lab, a worker that stopped before recording the
        confirm): one health round trip (its digest: 0.8 s at 20,000 members) instead of a
        full push (35-43 s)."""
        started = time.monotonic()
        reply = session.call("health", "--sample-ms", "0", timeout=60)
        data = reply.data
        runs = (
            reply.ok
            and data.get("version") == self.version.content_hash
            and data.get("confirmed") is True
            and not data.get("pending_confirm")
            and data.get("digest_differs") == []
            and bool((data.get("digest") or {}).get("parts"))
        )
        if not runs:
            return None
        self.log(PushStep.VERIFY, True, ALREADY_RUNS, started)
        return data["digest"]

    def rollback(self, session: FirewallSession) -> str:
        try:
            reply = self.step(session, PushStep.ROLLBACK, "rollback")
        except FirewallUnreachable as exc:
            return f"; the host reverts by itself when its confirm timer runs out ({exc})"
        if reply.ok:
            return "; the host restored its previous bundle"
        return f"; rollback failed: {reply.message}"

    def apply(
        self,
        session: FirewallSession,
        increment: rs.Incremental | None,
        during: Callable[[], None] | None = None,
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
            increment = getattr(version, "delta_increment", None)
            if increment is None:
                increment = increment_for(host=self.host, version=version)
            if increment is None and not self.host.holds_confirmed:
                digest = self.runs_already(session)
                if digest is not None:  # a full push would change nothing: none is sent
                    self.host.mark_applied(version, digest=digest)
                    return PushOutcome(self.host.name, True, "", ALREADY_RUNS, skipped=True)
            if increment is not None:
                # The host holds the previous version: send only the element changes.
                reply = self.apply(session, increment, once)
            fallback = getattr(version, "delta_fallback", None)
            if reply is not None and reply.data.get("phase") == "check" and fallback is not None:
                # A delta version has no texts to send in full: its increment was refused, so
                # compile in full (dropping the delta base) and push that version instead.
                self.version = version = fallback()
                reply = None
                increment = increment_for(host=self.host, version=version)
                if increment is not None:
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


def ruleset_push(
    *,
    host: FirewallHost,
    version: RuleSetVersion,
    session: FirewallSession | None = None,
    during: Callable[[], None] | None = None,
    only: set[str] | None = None,
) -> PushOutcome:
    """Check, arm the rollback timer and apply, verify the version and health (one round trip),
    then confirm (a second one); a failure after the apply rolls the host back. `session`: one
    already started (not entered) by the caller; the push closes it. `during` runs once while
    the host applies (always, also when the push fails first). `only`: a drift repair of
    just these artefacts, each in full (`Push.payload_of`)."""
    return Push(host, version, session, only).run(during)
