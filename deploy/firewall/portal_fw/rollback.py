"""The one rollback point (nft + tc + declared files + state) and the confirm timer.

run_dir/rollback.d is a symlink to run_dir/rp-<token>/ (swapped atomically with rename):

    meta.json   {"format": 1, "created_at", "nft_source", "nft_journal_bytes", "tc": {"current": bool, "devices":
                [...], "canon": {dev: text}}, "files": {name: {"present": bool}}, "state": {...}}
    nft.nft     the text that built the portal tables (a hard link to nft.current), or a dump
    nft.journal a hard link to nft.journal; its first `nft_journal_bytes` (meta) belong here
    tc.current  the tc batch that built the shaping then (absent: no portal shaping)
    files/NAME  each declared file's bytes (absent when the file was absent)

`confirm` disarms the timer; `rollback`, a failed apply and the timer restore everything the
point holds. The timer is a detached process (its own session), so it outlives the agent, the
SSH connection and the portal: an apply nobody confirms is undone by the host itself.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from . import deferred, nft, tc
from .common import JSON, HelperError, conflict, failed, now_iso, run
from .host import Host, write_bytes_atomic


def capture(host: Host, devices: Iterable[str]) -> JSON:
    """Save the current state of everything the helper manages as the rollback point."""
    started = time.monotonic()
    work = host.run_dir / f"rp-{secrets.token_hex(8)}"
    work.mkdir(mode=0o700)
    nft_started = time.monotonic()
    record = host.nft_record()
    journal_bytes = 0
    if record is not None:
        # The text that built the portal tables (the last full load + the journal of the
        # increments after it): files instead of reading back every element (38 s for 800k
        # elements). Hard links: nft.current is only ever replaced, never changed in place;
        # the journal only grows past the length recorded here (or is replaced).
        link_or_copy(host.nft_current, work / "nft.nft")
        journal_bytes = record[1]
        if journal_bytes:
            link_or_copy(host.nft_journal, work / "nft.journal")
        nft_source = "nft.current"
    else:
        (work / "nft.nft").write_text(nft.dump_portal_tables(host), encoding="utf-8")
        nft_source = "dump"
    nft_seconds = time.monotonic() - nft_started
    tc_present = host.tc_current.exists()
    if tc_present:  # replaced by rename only, like nft.current
        link_or_copy(host.tc_current, work / "tc.current")
    # The canonical text of the devices this bundle shapes (a later apply on the same point
    # adds its own: extend_rollback_devices). A device no apply touched keeps its shaping; a
    # restore reads its text right before it replays it, and verifies against that.
    touched = sorted(set(devices))
    files: dict[str, JSON] = {}
    (work / "files").mkdir()
    for name, art in host.artefacts.items():
        try:
            (work / "files" / name).write_bytes(art.path.read_bytes())
            files[name] = {"present": True}
        except FileNotFoundError:
            files[name] = {"present": False}
    meta = {
        "format": 1,
        "created_at": now_iso(),
        "nft_source": nft_source,
        "nft_journal_bytes": journal_bytes,
        "tc": {
            "current": tc_present,
            "devices": touched,
            "canon": {dev: tc.canon(dev) for dev in touched},
        },
        "files": files,
        "state": host.state(),
    }
    (work / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    switch_point(host, work.name)
    host.later.append(lambda: drop_stale_rollback_dirs(host))  # after the answer
    return {
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "nft_source": nft_source,
    }


def current_point(host: Host) -> str | None:
    return os.readlink(host.rollback_dir) if host.rollback_dir.is_symlink() else None


def switch_point(host: Host, name: str | None) -> None:
    """rollback.d := rp-NAME by one rename (None: no point)."""
    if name is None:
        host.rollback_dir.unlink(missing_ok=True)
        return
    link = host.run_dir / "rollback.d.new"
    link.unlink(missing_ok=True)
    os.symlink(name, link)
    os.replace(link, host.rollback_dir)  # the atomic switch


def link_or_copy(source: Path, target: Path) -> None:
    """`target` holds `source`'s bytes: a hard link where the file system allows one."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def drop_stale_rollback_dirs(host: Host) -> None:
    keep = os.readlink(host.rollback_dir) if host.rollback_dir.is_symlink() else None
    for path in host.run_dir.glob("rp-*"):
        if path.name != keep:
            remove_tree(path)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    for child in path.iterdir():
        remove_tree(child)
    path.rmdir()


def extend_devices(host: Host, devices: Iterable[str]) -> None:
    """A re-armed apply may shape devices the rollback point does not know yet. Those were not
    touched since the point was taken (every pending batch's devices were added when it was
    applied), so their canonical text now is the one to restore."""
    meta_file = host.rollback_dir / "meta.json"
    meta = json.loads(meta_file.read_text())
    new = sorted(set(devices) - set(meta["tc"]["devices"]))
    if not new:
        return
    meta["tc"]["devices"] = sorted([*meta["tc"]["devices"], *new])
    meta["tc"]["canon"].update({dev: tc.canon(dev) for dev in new})
    host.write_json(meta_file, meta)


def restore(host: Host, reason: str, extra_devices: Iterable[str] = ()) -> JSON:
    """Put back tc, nft and the declared files of the rollback point, then verify tc.

    Every part is attempted even when one fails; a failure raises afterwards (exit 1) with
    what went wrong. The point is consumed on success."""
    point = host.rollback_dir
    meta = json.loads((point / "meta.json").read_text())
    errors: list[str] = []
    saved_tc = (point / "tc.current").read_text() if meta["tc"]["current"] else None
    devices = sorted(
        set(meta["tc"]["devices"])
        | tc.devices(host.read_tc_current())
        | tc.devices(saved_tc)
        | set(extra_devices)
    )
    canon = dict(meta["tc"]["canon"])
    for dev in devices:  # untouched since the point: what runs now is what it held then
        if dev not in canon and dev not in set(extra_devices):
            canon[dev] = tc.canon(dev)
    errors += tc.replay(saved_tc, devices)
    if saved_tc is not None:
        host.write_file(host.tc_current, saved_tc)
    else:
        host.tc_current.unlink(missing_ok=True)
    try:  # a dump is a complete text as well
        nft.restore(host, point, int(meta.get("nft_journal_bytes", 0)))
    except HelperError as exc:
        errors.append(f"nft: {exc.detail or exc.message}")
        host.set_nft_current(None)
    for name, info in sorted(meta["files"].items()):
        art = host.artefacts.get(name)
        if art is None:
            errors.append(f"file {name}: no longer declared in --artefacts, not restored")
            continue
        try:
            if info["present"]:
                write_bytes_atomic(art.path, (point / "files" / name).read_bytes(), art.mode)
            else:
                art.path.unlink(missing_ok=True)
        except OSError as exc:
            errors.append(f"file {name}: {exc}")
            continue
        if art.deferred and info["present"]:  # Kea follows on its own path (deferred.py)
            deferred.request(host, name)
        elif art.reload and info["present"]:  # a file that was absent is removed, not reloaded
            result = run(art.argv(art.reload, art.path), timeout=120)
            if result.returncode != 0:
                errors.append(
                    f"file {name}: reload failed: {(result.stderr or result.stdout).strip()}"
                )
    mismatches = {
        dev: {"expected": expected, "actual": actual}
        for dev, expected in canon.items()
        if (actual := tc.canon(dev)) != expected
    }
    state = {
        **meta.get("state", {}),
        "last_event": {"event": "rolled-back", "reason": reason, "at": now_iso()},
    }
    host.write_json(host.state_file, state)
    event = {"event": "rolled-back", "reason": reason, "to": state.get("version"),
             "tc_verified": not mismatches, "errors": errors}  # fmt: skip
    if mismatches:
        event["tc_mismatch"] = mismatches
    host.log(event)
    if errors:
        raise failed(
            "restoring the rollback point failed in part",
            "\n".join(errors),
            tc_mismatch=sorted(mismatches),
        )
    host.rollback_dir.unlink()
    drop_stale_rollback_dirs(host)
    return {**state, "_restore": {"tc_verified": not mismatches, "tc_mismatch": mismatches}}


def rollback_now(host: Host, reason: str) -> JSON:
    """Restore the rollback point (the caller holds the lock); returns the restored state."""
    if not host.rollback_dir.exists():
        raise conflict("no rollback point on this host")
    return restore(host, reason)


def timer(host: Host, token: str) -> int:
    """The detached confirm timer: wait for the deadline in pending.json (an apply moves it to
    count from its answer), then restore the point unless confirmed or superseded."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        pending = host.read_json(host.pending_file)
        if not pending or pending.get("token") != token:
            return 0  # confirmed, rolled back or superseded
        left = float(pending["deadline"]) - time.time()
        if left > 0:
            time.sleep(min(left, 0.5))
            continue
        with host.locked(timeout=600):
            pending = host.read_json(host.pending_file)
            if not pending or pending.get("token") != token:
                return 0
            if float(pending["deadline"]) > time.time():
                continue  # the apply that held the lock moved the deadline
            try:
                rollback_now(host, f"not confirmed within {pending.get('confirm_within')}s")
            except HelperError as exc:
                host.log({"event": "timer-rollback-failed", "message": exc.message,
                          "detail": exc.detail})  # fmt: skip
                return 1
            finally:
                host.pending_file.unlink(missing_ok=True)
        return 0
