"""One firewall host as the agent sees it: its options, its state directory, its lock, its log.

State directory (``--state-dir``, root-only):

    state.json          what was applied last (version, modes, digest, confirmed)
    pending.json        an armed confirm timer (token, deadline, timer pid)
    rollback.d -> rp-*  the one rollback point (rollback.py)
    nft.current(.json)  the nft text that built the portal tables (last replace + increments)
    tc.current          the tc batch that built the shaping
    upload.nft, transaction.nft   the text being checked or loaded
    acct.json           traffic counted by replaced tables (traffic.py)
    log.jsonl           every apply, confirm, rollback and refusal (rotated at 1 MiB)
    lock                flock: one operation at a time, across agents and the timer
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .common import JSON, TOOL_ENV, HelperError, now_iso

LOCK_TIMEOUT = 60.0
LOG_MAX_BYTES = 1024 * 1024
PACKAGE_DIR = Path(os.path.realpath(__file__)).parent.parent  # holds the package portal_fw
_TIMERS: list[subprocess.Popen[bytes]] = []  # timers this process started (reaped when done)


class Host:
    """One firewall host: where its state lives and the options of its forced command."""

    def __init__(
        self,
        state_dir: Path,
        name: str,
        prefix: str = "portal_",
        artefacts_file: Path | None = None,
        ha_run_dir: Path = Path("/run/portal-ha"),
        digest_source: str = "auto",
    ) -> None:
        from .bundle import FileArtefact

        self.state_dir = state_dir
        self.name = name
        self.prefix = prefix
        self.artefacts_file = artefacts_file
        self.artefacts: dict[str, FileArtefact] = {}
        self.ha_run_dir = ha_run_dir
        self.digest_source = digest_source  # auto: netlink, falling back to nft -j
        self.lock_file = state_dir / "lock"
        self.state_file = state_dir / "state.json"
        self.pending_file = state_dir / "pending.json"
        self.rollback_dir = state_dir / "rollback.d"
        self.tc_current = state_dir / "tc.current"
        self.nft_current = state_dir / "nft.current"
        self.nft_current_meta = state_dir / "nft.current.json"  # {"bytes": N}: complete?
        self.upload_nft = state_dir / "upload.nft"
        self.tx_nft = state_dir / "transaction.nft"
        self.log_file = state_dir / "log.jsonl"
        self.acct_file = state_dir / "acct.json"

    # ---- files --------------------------------------------------------------------------
    def read_json(self, path: Path) -> JSON | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_file(self, path: Path, data: str, *, durable: bool = False) -> None:
        """Replace `path` by rename (atomic for readers and for the death of this process).
        `durable`: fsync first. Only the state is: scratch texts, the rollback point and the
        timer's file describe the kernel's rule set, which a power loss takes with them."""
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)

    def write_json(
        self, path: Path, obj: JSON, *, compact: bool = False, durable: bool = False
    ) -> None:
        if compact:  # large state: the C encoder (indent makes json use the Python one)
            self.write_file(path, json.dumps(obj, separators=(",", ":")) + "\n", durable=durable)
        else:
            text = json.dumps(obj, indent=1, sort_keys=True) + "\n"
            self.write_file(path, text, durable=durable)

    def state(self) -> JSON:
        return self.read_json(self.state_file) or {}

    def log(self, event: JSON) -> None:
        event = {"at": now_iso(), "host": self.name, **event}
        try:
            if self.log_file.exists() and self.log_file.stat().st_size > LOG_MAX_BYTES:
                os.replace(self.log_file, self.log_file.with_name("log.jsonl.1"))
            with open(self.log_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(event, sort_keys=True) + "\n")
        except OSError:
            pass

    @contextlib.contextmanager
    def locked(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise HelperError(
                            "busy", "another operation is running on this host"
                        ) from exc
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    # ---- the texts that built what runs -------------------------------------------------
    def nft_current_valid(self) -> bool:
        """nft.current is complete (its size is the one recorded after its last write)."""
        meta = self.read_json(self.nft_current_meta) or {}
        try:
            return meta.get("bytes") == self.nft_current.stat().st_size
        except FileNotFoundError:
            return False

    def set_nft_current(self, source: Path | None, append: str | None = None) -> None:
        """nft.current := a copy of `source` (+ `append`), or forget it (source None)."""
        self.nft_current_meta.unlink(missing_ok=True)
        if source is None:
            self.nft_current.unlink(missing_ok=True)
            return
        tmp = self.nft_current.with_name("nft.current.tmp")
        shutil.copyfile(source, tmp)
        if append is not None:
            with open(tmp, "a", encoding="utf-8") as fh:
                fh.write(append if append.endswith("\n") else append + "\n")
        os.replace(tmp, self.nft_current)
        self.write_json(self.nft_current_meta, {"bytes": self.nft_current.stat().st_size})

    def read_tc_current(self) -> str | None:
        try:
            return self.tc_current.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    # ---- the confirm timer: a detached process, so it outlives the agent and the connection
    def timer_argv(self, token: str) -> list[str]:
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv.pop(1)); from portal_fw import agent; "
            "sys.exit(agent.main())",
            str(PACKAGE_DIR),
            "--state-dir",
            str(self.state_dir),
            "--host-name",
            self.name,
            "--table-prefix",
            self.prefix,
            "--digest-source",
            self.digest_source,
        ]
        if self.artefacts_file is not None:
            argv += ["--artefacts", str(self.artefacts_file)]
        return [*argv, "--internal-rollback-timer", token]

    def arm_timer(self, token: str) -> int:
        reap_timers()
        proc = subprocess.Popen(  # noqa: S603 - ourselves, fixed argv
            self.timer_argv(token),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            env=TOOL_ENV,
        )
        _TIMERS.append(proc)
        return proc.pid

    def kill_timer(self, pending: dict[str, Any] | None) -> None:
        if not pending or not pending.get("timer_pid"):
            return
        pid = int(pending["timer_pid"])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return
        if str(pending["token"]).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        reap_timers()


def reap_timers() -> None:
    """Collect the timers this process started that have ended (an agent lives long)."""
    for running in list(_TIMERS):
        if running.poll() is not None:
            _TIMERS.remove(running)
