"""apply-bundle, confirm, rollback: the one apply path.

Under the host's lock: check every artefact (nothing changes), arm the one rollback point and
the confirm timer, apply (tc's new classes -> nft -> tc's removed classes -> files: the rule
set never names a class that does not exist; a full nft replacement or an element-only
increment is one transaction checked by its own load instead of a separate `nft -c`),
read back the digest and a health sample. A failure half way restores the whole point; an nft
load refused at the start changed nothing and is answered as refused at the check (a refused
increment: the portal then sends the full bundle; the classes made before it are taken back).

A full replacement is checked by its own load because `nft -c` costs what the load costs (the
text parsed and every element inserted, then the transaction aborted: about 8 s at 100,000
members; issue 26) and the kernel's transaction is atomic: a refused `nft -f` changed nothing.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import secrets
import time
from typing import Any, NoReturn

from . import deferred, digest, health, nft, probes, rollback, tc
from .bundle import RESERVED_ARTEFACTS, parse_bundle
from .common import JSON, HelperError, at_check, conflict, failed, now_iso, run
from .host import Host, write_bytes_atomic
from .scope import check_scope, element_only


def is_element_increment(artefacts: JSON) -> bool:
    """The bundle's nft is an increment of element adds/deletes (or set flushes) only."""
    spec = artefacts.get("nft")
    return bool(spec and spec["mode"] == "increment" and element_only(spec["text"]) is not None)


def loaded_as_check(artefacts: JSON) -> bool:
    """The bundle's nft is checked by its own load (one kernel transaction, refused whole):
    a full replacement, or an increment of element adds/deletes only."""
    spec = artefacts.get("nft")
    return bool(spec and spec["mode"] == "replace") or is_element_increment(artefacts)


def check_bundle(host: Host, artefacts: JSON) -> set[str]:
    """Check every artefact; nothing on the host changes. Returns the tc devices the bundle
    changes (names, or drops by replacing the batch)."""
    devices: set[str] = set()
    if "tc" in artefacts:
        devices = tc.static_check(artefacts["tc"]["text"])
        if artefacts["tc"]["mode"] == "replace":  # also drops the shaping of devices it omits
            devices |= tc.devices(host.read_tc_current())
    if "nft" in artefacts:
        spec = artefacts["nft"]
        check_scope(spec["text"], host.prefix)
        probes.check(spec["text"])
        if not loaded_as_check(artefacts):
            result = nft.check(host, spec["text"], replace=spec["mode"] == "replace")
            if result.returncode != 0:
                raise failed("nft rejected the rule set", result.stderr.strip(), artefact="nft")
    for name, art in sorted(artefacts.items()):
        if name not in RESERVED_ARTEFACTS:
            check_file(host, name, art["text"])
    return devices


def check_file(host: Host, name: str, text: str) -> None:
    """The declared check of one file artefact, on a temp file next to its target (a deferred
    one: without its reservations, see deferred.py)."""
    spec = host.artefacts[name]
    if spec.deferred:
        text = deferred.skeleton(text)
    if not spec.path.parent.is_dir():
        raise failed(f"{name}: {spec.path.parent} is missing", artefact=name)
    tmp = spec.path.with_name(f".{spec.path.name}.portal-fw-check-{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, spec.mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        result = run(spec.argv(spec.check, tmp), timeout=120)
    finally:
        tmp.unlink(missing_ok=True)
    if result.returncode != 0:
        detail = (result.stderr + result.stdout).strip()[-4000:]
        raise failed(
            f"the check of {name} failed (exit {result.returncode})", detail, artefact=name
        )


def load_nft(host: Host, spec: JSON) -> str:
    """Load the nft artefact; answers how ("netlink": one batch, "nft": the nft tool)."""
    if spec["mode"] == "replace":
        result, how = nft.load(host, spec["text"], replace=True), "nft"
    else:
        result, how = nft.load_increment(host, spec["text"])
    if result.returncode != 0:
        raise failed("nft rejected the rule set at apply", result.stderr.strip()[-4000:],
                     artefact="nft", via=how)  # fmt: skip
    return how


def apply_artefacts(host: Host, artefacts: JSON) -> JSON:
    """The whole apply outside a rollback point (tc's classes made, nft, tc's classes removed,
    files); raises at the first failure, naming the artefact."""
    staged = (
        tc.Staged(host, artefacts["tc"]["mode"], artefacts["tc"]["text"])
        if "tc" in artefacts
        else None
    )
    if staged is not None:
        staged.run_before()
    if "nft" in artefacts:
        load_nft(host, artefacts["nft"])
    shaping = staged.run_after() if staged is not None else {}
    apply_files(host, artefacts)
    return shaping


def apply_files(host: Host, artefacts: JSON) -> None:
    """Write each file artefact and reload it (a deferred one after the answer). Raises at the
    first failure, naming the artefact (the caller restores the rollback point)."""
    for name, art in sorted(artefacts.items()):
        if name in RESERVED_ARTEFACTS:
            continue
        spec = host.artefacts[name]
        try:
            write_bytes_atomic(spec.path, art["text"].encode("utf-8"), spec.mode)
        except OSError as exc:
            raise failed(f"writing {spec.path} failed", str(exc), artefact=name) from exc
        if spec.deferred:  # the Kea path reloads it after the answer, beside the next pushes
            host.later.append(functools.partial(deferred.ask, host, name))
        elif spec.reload:
            result = run(spec.argv(spec.reload, spec.path), timeout=120)
            if result.returncode != 0:
                detail = (result.stderr + result.stdout).strip()[-4000:]
                raise failed(f"the reload of {name} failed (exit {result.returncode})", detail,
                             artefact=name)  # fmt: skip


class Armed:
    """The rollback point and the confirm timer of one apply, and how to take them back when
    an element-only increment was refused before anything changed."""

    def __init__(self, host: Host, version: str, confirm_within: int, devices: set[str]) -> None:
        started = time.monotonic()
        self.host = host
        self.old_point = rollback.current_point(host)
        self.old_pending = host.read_json(host.pending_file)
        if self.old_pending:
            # Still unconfirmed: keep the rollback point of the last confirmed state.
            host.kill_timer(self.old_pending)
            if host.rollback_dir.exists():
                rollback.extend_devices(host, devices)
            else:
                rollback.capture(host, devices)
            self.point: JSON = {"seconds": round(time.monotonic() - started, 3), "kept": True}
        else:
            self.point = {**rollback.capture(host, devices), "kept": False}
        self.pending: JSON = {
            "token": secrets.token_hex(16),
            "armed_at": now_iso(),
            "deadline": time.time() + confirm_within,
            "confirm_within": confirm_within,
            "version": version,
        }
        host.write_json(host.pending_file, self.pending)
        # The timer's pid reaches pending.json with the answer (restart_window); a timer whose
        # token is gone from pending.json ends by itself within half a second.
        self.pending["timer_pid"] = host.arm_timer(self.pending["token"])

    def take_back(self) -> None:
        """Nothing was applied: the host is as it was, so are its rollback point (the new one
        goes after the answer) and its confirm state."""
        self.host.kill_timer(self.pending)
        rollback.switch_point(self.host, self.old_point)
        if self.old_pending:
            self.old_pending["timer_pid"] = self.host.arm_timer(self.old_pending["token"])
            self.host.write_json(self.host.pending_file, self.old_pending)
        else:
            self.host.pending_file.unlink(missing_ok=True)

    def restart_window(self) -> str:
        """The confirm window counts from the answer, not from the arming: a full bundle of a
        large site may take longer to apply and read back than the window itself."""
        self.pending["deadline"] = time.time() + self.pending["confirm_within"]
        self.host.write_json(self.host.pending_file, self.pending)
        return dt.datetime.fromtimestamp(self.pending["deadline"], dt.UTC).isoformat()


def apply_bundle(host: Host, args: JSON) -> JSON:
    """Check every artefact, arm one rollback point and the timer, apply, restore everything
    at once if a step fails, answer the content digest (and health)."""
    try:
        bundle = parse_bundle(args["input"], host.artefacts)
    except HelperError as exc:
        raise at_check(exc) from None
    artefacts, version = bundle["artefacts"], bundle["version"]
    sample_ms = args.get("health_sample_ms")
    modes = {name: art["mode"] for name, art in sorted(artefacts.items())}
    ha = None
    if sample_ms is not None and health.is_paired(host) and not set(artefacts) - RESERVED_ARTEFACTS:
        # No configuration file changes: the pair's daemons are not touched by this apply, so
        # their status is read alongside it.
        ha = health.HaStatus(host)
        ha.start()
    with host.locked():
        started = time.monotonic()
        try:
            devices = check_bundle(host, artefacts)
        except HelperError as exc:
            host.log({"event": "bundle-refused-by-check", "version": version,
                      "artefact": exc.extra.get("artefact"), "message": exc.message})  # fmt: skip
            raise at_check(exc) from None
        check_seconds = round(time.monotonic() - started, 3)
        previous = host.state()
        armed = Armed(host, version, int(args["confirm_within"]), devices)
        # The host's listener (kept open: see Host.netlink), emptied just before the load.
        events = digest.open_element_events(host, artefacts, previous.get("digest"))
        started = time.monotonic()
        applied, shaping = apply_steps(host, artefacts, armed, devices)
        apply_seconds = round(time.monotonic() - started, 3)
        read = digest.incremental_digest(host, artefacts, previous.get("digest"), events)
        if events is not None:  # what a later commit queues is not kept waiting in the kernel
            host.later.append(events.drain)
        read = read or digest.digest_or_error(host)
        host.write_json(host.state_file, {"version": version, "bundle": True, "modes": modes,
                        "applied_at": now_iso(), "confirmed": False,
                        "digest": digest.recorded_digest(read)}, compact=True)  # fmt: skip
        sampled = None if sample_ms is None else health.collect(host, sample_ms, digest=read, ha=ha)
        deadline = armed.restart_window()
    host.log({"event": "bundle-applied", "version": version, "modes": modes,
              "digest": read.get("total"), "s": apply_seconds, "via": applied,
              **({"tc": shaping} if shaping else {})})  # fmt: skip
    answer: JSON = {
        "version": version,
        "modes": modes,
        "digest": digest.public_digest(read),
        "check_seconds": check_seconds,
        "rollback_point": armed.point,
        "apply_seconds": apply_seconds,
        "applied_by": applied,
        **({"tc_tree": shaping} if shaping else {}),
        "confirm_deadline": deadline,
        "confirm_within": int(args["confirm_within"]),
    }
    if sampled is not None:
        answer["health"] = sampled
    return answer


def apply_steps(host: Host, artefacts: JSON, armed: Armed, devices: set[str]) -> tuple[str, JSON]:
    """Apply under the armed point, in the order that never lets the rule set name a class
    that does not exist: tc's new and changed classes (a device built anew), then nft, then
    tc's removed classes (and dropped devices), then files. Returns how ("element-increment"
    with "netlink" or "nft", "replace" for a full replacement checked by its own load, or
    "steps") and, for a full tc tree, which devices kept their tree (`tc.Staged`).

    An nft text checked by its own load (a full replacement, an element-only increment) that
    the kernel refuses changed no table: the classes made before it are taken back (tc.current
    replayed against what runs), then the point and the timer, and the answer is a refusal at
    the check, as before. Any other failure restores the whole point."""
    staged = None
    try:
        if "tc" in artefacts:
            staged = tc.Staged(host, artefacts["tc"]["mode"], artefacts["tc"]["text"])
            staged.run_before()
    except HelperError as exc:
        return failed_apply(host, exc, armed, devices)
    how = "steps"
    if "nft" in artefacts:
        checked_by_load = loaded_as_check(artefacts)
        increment = artefacts["nft"]["mode"] != "replace"
        try:
            loaded_by = load_nft(host, artefacts["nft"])
        except HelperError as exc:
            if not checked_by_load or exc.extra.get("unknown"):
                # not a text checked by its load, or not known whether the kernel took it
                return failed_apply(host, exc, armed, devices)
            undo = staged.undo_before() if staged is not None else []
            if undo:  # the classes made before it could not be taken back: restore all
                exc.extra["tc_undo"] = undo
                return failed_apply(host, exc, armed, devices)
            armed.take_back()
            event = "increment-refused" if increment else "bundle-refused-by-check"
            host.log({"event": event, "version": armed.pending["version"], "artefact": "nft",
                      "detail": exc.detail})  # fmt: skip
            if increment:
                exc.message = "nft refused the element increment; nothing changed"
                exc.extra["increment_refused"] = True
            else:
                exc.message = "nft rejected the rule set"
            raise at_check(exc) from None
        if checked_by_load:
            how = f"element-increment ({loaded_by})" if increment else "replace"
    try:
        shaping = staged.run_after() if staged is not None else {}
        apply_files(host, artefacts)
    except HelperError as exc:
        return failed_apply(host, exc, armed, devices)
    return how, shaping


def failed_apply(host: Host, exc: HelperError, armed: Armed, devices: set[str]) -> NoReturn:
    """A step failed half way: restore the whole point, disarm the timer, raise."""
    host.kill_timer(armed.pending)
    exc.phase = "apply"
    restore_after_failure(host, exc, devices)
    host.pending_file.unlink(missing_ok=True)
    host.log({"event": "bundle-apply-failed", "version": armed.pending["version"],
              "artefact": exc.extra.get("artefact"), "detail": exc.detail, **exc.extra})  # fmt: skip
    raise exc


def restore_after_failure(host: Host, exc: HelperError, devices: set[str]) -> None:
    artefact = exc.extra.get("artefact")
    try:
        restored = rollback.restore(host, f"apply of {artefact} failed", extra_devices=devices)
        exc.extra.update(
            rolled_back=True,
            restored_version=restored.get("version"),
            tc_verified=restored["_restore"]["tc_verified"],
            tc_mismatch=sorted(restored["_restore"]["tc_mismatch"]),
        )
    except HelperError as restore_error:
        exc.extra.update(rolled_back=False, restore_error=restore_error.message,
                         restore_detail=restore_error.detail)  # fmt: skip


def confirm(host: Host, args: JSON) -> JSON:
    """Keep what was applied: disarm the timer."""
    with host.locked():
        pending = host.read_json(host.pending_file)
        state = host.state()
        if not pending:
            last: Any = state.get("last_event") or {}
            said = f" (last event: {last.get('event')} at {last.get('at')}: {last.get('reason')})"
            raise conflict("nothing to confirm" + (said if last else ""))
        host.kill_timer(pending)
        host.pending_file.unlink()
        state.update(confirmed=True, confirmed_at=now_iso(), last_event=None)
        host.write_json(host.state_file, state, compact=True)
    host.log({"event": "confirmed", "version": state.get("version")})
    return {"version": state.get("version"), "confirmed": True}


def rollback_verb(host: Host, args: JSON) -> JSON:
    """Restore the rollback point now (the state before the last apply, confirmed or not)."""
    with host.locked():
        pending = host.read_json(host.pending_file)
        restored = rollback.rollback_now(host, "requested by the portal")
        if pending:
            host.kill_timer(pending)
            host.pending_file.unlink(missing_ok=True)
    answer = {"version": restored.get("version"), "rolled_back": True, "was_pending": bool(pending)}
    answer.update(restored["_restore"])
    return answer


def version(host: Host, args: JSON) -> JSON:
    """Operator verb: what this host applied and whether a confirm is pending."""
    state = host.state()
    return {
        "version": state.get("version"),
        "state": state or None,
        "pending_confirm": health.pending_summary(host.read_json(host.pending_file)),
    }


def digest_verb(host: Host, args: JSON) -> JSON:
    """Operator verb: a full digest of what runs, and which parts differ from the last apply."""
    read = digest.public_digest(digest.compute_digest(host))
    state = host.state()
    recorded = (state.get("digest") or {}).get("parts") or {}
    answer: JSON = {"version": state.get("version"), "digest": read}
    if recorded:
        keys = set(recorded) | set(read["parts"])
        answer["differs_from_applied"] = sorted(
            k for k in keys if recorded.get(k) != read["parts"].get(k)
        )
    return answer
