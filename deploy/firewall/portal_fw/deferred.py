"""The Kea path: a declared file whose reload runs beside the nft path, never in an apply.

A file artefact declared with ``"deferred": true`` (only ``kea-dhcp4``) is checked, written and
held by the one rollback point like any file, but its reload does not run inside
``apply-bundle``: a Kea config-reload takes 0.7 s at 20,000 members and 4.9 s at 100,000
(its full ``kea-dhcp4 -t`` as long again), and the forward that came with it, or the next one
waiting for the site's lock, must not wait for that. So:

- the check of ``apply-bundle`` runs the declared check on the file **without its
  reservations** (``skeleton``): interfaces, subnets, pools, options, classes are what a host
  can refuse; the reservations were validated by the portal's compiler (six hex pairs, an
  address inside the subnet and outside the pools, no MAC or address twice), and Kea itself
  validates them again at the reload;
- the apply writes the file (atomically, as before) and, after its answer, asks the Kea path
  (``request``): it bumps ``deferred-NAME.request`` and starts a detached process
  (``--internal-deferred NAME``: it outlives the agent and the connection, as the timer does);
- that process (one at a time per artefact: ``deferred-NAME.lock``) runs the declared reload
  for the newest request; requests made meanwhile are carried by its next round (one reload
  for any number of changes). Kea re-reads the file as it is then, so the last round loads the
  newest file;
- a reload Kea refuses leaves Kea on its previous configuration (config-reload keeps it): the
  path puts the last file Kea accepted back in place (a Kea restart must not meet a file it
  refuses) and records the refusal; the file then differs from what the portal pushed, which
  the drift check shows as ``file:NAME``. A reload that finds Kea not answering (exit 3 of
  ``kea-ctl reload``: Kea stopped or hung) keeps the file (a started Kea reads it) and is
  tried again after 2, 4, 8 ... 60 s, at most ``RETRIES`` times, or at once with a new request;
- ``deferred-NAME.status`` says what the path did last (``state``: loading / loaded /
  refused / not-answering, the request it served, seconds, the error); every health sample
  carries it (``dhcp.config``), so the portal shows whether Kea runs what was pushed.

The rollback point holds the file like any other: a restore writes the previous file back and
asks the Kea path (it does not reload in the restore either), so Kea follows the rollback
point within one reload.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .bundle import FileArtefact
from .common import JSON, HelperError, failed, now_iso, run, sha256
from .host import Host, write_bytes_atomic

RELOAD_TIMEOUT = 600.0  # a reload of 300,000 reservations takes ~5 s; a hung Kea is cut off
RETRIES = 8  # tries after "not answering": 2, 4, 8, 16, 32, 60, 60, 60 s (about 4 min)
NOT_ANSWERING = 3  # kea-ctl reload's exit status when Kea does not answer on its socket


def _files(host: Host, name: str) -> tuple[Path, Path, Path, Path]:
    base = host.run_dir / f"deferred-{name}"
    return (
        base.with_name(base.name + ".request"),
        base.with_name(base.name + ".status"),
        base.with_name(base.name + ".lock"),
        base.with_name(base.name + ".loaded"),  # the last file Kea accepted
    )


def skeleton(text: str) -> str:
    """The Kea configuration without its reservations: what `apply-bundle` checks."""
    try:
        config = json.loads(text)
        dhcp4 = config["Dhcp4"]
    except (ValueError, KeyError, TypeError) as exc:
        raise failed(f"kea-dhcp4: not a Kea configuration ({exc})", artefact="kea-dhcp4") from exc
    if isinstance(dhcp4, dict):
        dhcp4.pop("reservations", None)
        for subnet in dhcp4.get("subnet4") or []:
            if isinstance(subnet, dict):
                subnet.pop("reservations", None)
    return json.dumps(config)


def request(host: Host, name: str) -> int:
    """Ask the Kea path to load the file as it is now; returns the request's number."""
    request_file, _status, _lock, _loaded = _files(host, name)
    seq = int((host.read_json(request_file) or {}).get("seq", 0)) + 1
    host.write_json(request_file, {"seq": seq, "at": now_iso()})
    host.spawn_internal(["--internal-deferred", name])
    return seq


def ask(host: Host, name: str) -> None:
    """`request`, for the work an answer does not wait for (Host.later)."""
    request(host, name)


def status(host: Host, name: str) -> JSON:
    """What the Kea path did last, and whether a request waits for it (`pending`)."""
    request_file, status_file, lock_file, _loaded = _files(host, name)
    wanted = int((host.read_json(request_file) or {}).get("seq", 0))
    answer = dict(host.read_json(status_file) or {})
    answer["requested"] = wanted
    answer["pending"] = wanted > int(answer.get("seq", 0))
    answer["running"] = _held(lock_file)
    return answer


def busy(host: Host, name: str) -> bool:
    """A reload runs now (Kea does not answer its socket until it is done); a path that died
    while loading holds no lock any more."""
    _request, status_file, lock_file, _loaded = _files(host, name)
    return (host.read_json(status_file) or {}).get("state") == "loading" and _held(lock_file)


def _held(lock_file: Path) -> bool:
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _reload(spec: FileArtefact, loaded: Path | None) -> tuple[int, str]:
    try:
        result = run(spec.argv(spec.reload, spec.path, loaded), timeout=RELOAD_TIMEOUT)
    except HelperError as exc:  # timed out: Kea hung
        return NOT_ANSWERING, exc.message
    return result.returncode, (result.stderr + result.stdout).strip()[-2000:]


def serve(host: Host, name: str) -> int:
    """The detached Kea path: reload until the newest request is served (see the module)."""
    spec = host.artefacts.get(name)
    if spec is None or not spec.reload:
        return 1
    request_file, status_file, lock_file, loaded_file = _files(host, name)
    tries = 0  # reloads this process tried that found Kea not answering
    with _locked(lock_file):
        while True:
            wanted = int((host.read_json(request_file) or {}).get("seq", 0))
            last = host.read_json(status_file) or {}
            if int(last.get("seq", 0)) >= wanted:
                if last.get("state") != "not-answering" or not tries or tries > RETRIES:
                    return 0 if last.get("state") in (None, "loaded") else 1
                time.sleep(min(60, 2**tries))  # Kea was not answering: try again
                wanted = int((host.read_json(request_file) or {}).get("seq", 0))
            started = time.monotonic()
            text = spec.path.read_bytes() if spec.path.exists() else b""
            host.write_json(status_file, {**last, "state": "loading", "loading": wanted,
                                          "since": now_iso()})  # fmt: skip
            # What Kea runs now, when the path knows it: the file of its last reload, unless
            # a reload since found Kea not answering (it may have restarted on a newer file).
            # kea-ctl then frees only the leases of reservations that changed (`{loaded}`).
            known = last.get("state") in ("loaded", "refused") and loaded_file.exists()
            code, detail = _reload(spec, loaded_file if known else None)
            done: JSON = {
                "seq": wanted,
                "at": now_iso(),
                "seconds": round(time.monotonic() - started, 3),
                "sha256": sha256(text.decode("utf-8", "replace")),
            }
            if code == 0:
                tries = 0
                # What this round read before the reload: a file written meanwhile is the
                # next round's (its request is pending), which frees what changed since this.
                fresh = loaded_file.with_name(loaded_file.name + ".new")
                fresh.write_bytes(text)
                fresh.replace(loaded_file)
                done["state"] = "loaded"
            elif code == NOT_ANSWERING:
                tries += 1
                done.update(state="not-answering", error=detail, tries=tries)
            else:
                tries = 0
                done.update(state="refused", error=detail)
                put_back(spec, loaded_file, text)
            host.write_json(status_file, done)
            host.log({"event": f"deferred-{done['state']}", "artefact": name, "request": wanted,
                      "s": done["seconds"], "error": done.get("error", "")[:300]})  # fmt: skip


def put_back(spec: FileArtefact, loaded_file: Path, refused_text: bytes) -> None:
    """Kea kept its previous configuration: the file it accepted last goes back in place,
    unless the portal wrote a newer file meanwhile (the next round loads that one)."""
    if not loaded_file.exists() or spec.path.read_bytes() != refused_text:
        return
    write_bytes_atomic(spec.path, loaded_file.read_bytes(), spec.mode)
