"""One firewall host as the agent sees it: its options, its state directory, its lock, its log.

State directory (``--state-dir``, root-only) and run directory (``--run-dir``, default: the
state directory; on a host ``/run/portal-fw``, a tmpfs). The files marked * describe the
kernel's rule set and live in the run directory: they end with it at a reboot, and replacing
a file by rename there costs microseconds (on ext4 a rename over a file flushes it: 1-4 ms).

    state.json *        what was applied last (version, modes, digest, confirmed)
    pending.json *      an armed confirm timer (token, deadline, timer pid)
    rollback.d -> rp-* * the one rollback point (rollback.py)
    nft.current *       the nft text of the last full load (or restore) of the portal tables
    nft.journal *       the increments loaded since, appended (nft.current.json: the lengths)
    tc.current *        the tc batch that built the shaping
    upload.nft, transaction.nft *   the text being checked or loaded
    transaction.gated.nft *   a full replacement's, held before its evaluation (nft.py)
    acct.json           traffic counted by replaced tables (acctstate.py)
    acct.pending.json   the counters a full replacement read before its commit, not folded yet
    log.jsonl           every apply, confirm, rollback and refusal (rotated at 1 MiB)
    lock                flock: one operation at a time, across agents and the timer
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import JSON, TOOL_ENV, HelperError, now_iso

if TYPE_CHECKING:
    from .netlink import ElementEvents, NftNetlink

LOCK_TIMEOUT = 60.0
LOG_MAX_BYTES = 1024 * 1024
JOURNAL_COMPACT_BYTES = 1024 * 1024  # folded into the base after an answer
PACKAGE_DIR = Path(os.path.realpath(__file__)).parent.parent  # holds the package portal_fw
_TIMERS: list[int] = []  # pids of the timers this process started (reaped when done)


def write_bytes_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace a declared file (Kea, keepalived: outside the state directory, outlives a reboot)
    by rename, fsynced, with its declared mode (apply, rollback and deferred.put_back)."""
    tmp = path.with_name(f".{path.name}.portal-fw-{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
        run_dir: Path | None = None,
    ) -> None:
        from .bundle import FileArtefact

        self.state_dir = state_dir
        self.run_dir = run = run_dir or state_dir
        self.name = name
        self.prefix = prefix
        self.artefacts_file = artefacts_file
        self.artefacts: dict[str, FileArtefact] = {}
        self.ha_run_dir = ha_run_dir
        self.digest_source = digest_source  # auto: netlink, falling back to nft -j
        self.lock_file = state_dir / "lock"
        self.state_file = run / "state.json"
        self.pending_file = run / "pending.json"
        self.rollback_dir = run / "rollback.d"
        self.tc_current = run / "tc.current"
        self.nft_current = run / "nft.current"
        self.nft_journal = run / "nft.journal"
        self.nft_current_meta = run / "nft.current.json"  # {"base": N, "journal": M}
        self.upload_nft = run / "upload.nft"
        self.tx_nft = run / "transaction.nft"
        self.log_file = state_dir / "log.jsonl"
        self.acct_file = state_dir / "acct.json"
        self.check_text: str | None = None  # the nft text `nft.check` left in upload.nft
        self.later: list[Callable[[], None]] = []  # work for after the answer (run_later)
        self._netlink: NftNetlink | None = None
        self._events: ElementEvents | None = None

    # ---- files --------------------------------------------------------------------------
    def read_json(self, path: Path) -> JSON | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_file(self, path: Path, data: str, *, durable: bool = False) -> None:
        """Replace `path` by rename (atomic for readers and for the death of this process).
        `durable`: fsync first. Nothing in the state directory needs it: every file there
        describes the kernel's rule set (or what to put back into it), and what kills the page
        cache (a power loss, a crash of the host) takes the rule set with it; the death of the
        agent, the SSH connection or the portal leaves both in place (the timer restores from
        the point). Only the declared files (Kea, keepalived) outlive a reboot, and their
        writes are fsynced (write_bytes_atomic)."""
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

    # ---- netlink sockets kept open for the agent's life: the kernel answers the release of a
    # NETLINK_NETFILTER socket after a commit that deleted something by waiting for that
    # commit's deferred destruction (an RCU grace period, 5-15 ms). A socket closed inside a
    # request would make the answer wait; these close when the agent ends.
    def netlink(self) -> NftNetlink:
        """For element batches and the reads of a steady apply (set declarations, quota hits)."""
        if self._netlink is None:
            from .netlink import NftNetlink

            self._netlink = NftNetlink()
        return self._netlink

    def element_events(self) -> ElementEvents:
        """The listener for the kernel's element notifications, emptied of what came before."""
        if self._events is None:
            from .netlink import ElementEvents

            self._events = ElementEvents()
        self._events.drain()
        return self._events

    def drop_netlink(self) -> None:
        """After an error on a socket: the next request opens a new one."""
        for sock in (self._netlink, self._events):
            if sock is not None:
                sock.close()
        self._netlink = self._events = None

    def run_later(self) -> None:
        """The work an answer did not wait for (dropping old rollback points, folding the nft
        journal), under the lock, after the answer went out."""
        work, self.later = self.later, []
        if not work:
            return
        try:
            with self.locked():
                for step in work:
                    step()
        except (HelperError, OSError) as exc:
            self.log({"event": "later-failed", "message": str(exc)[:300]})

    # ---- the nft text that built what runs: a base (the last full load or restore) and a
    # journal of the increments since (appended; never changed below its recorded length)
    def nft_record(self) -> tuple[int, int] | None:
        """(base bytes, journal bytes) when nft.current + nft.journal are known to have built
        the portal tables: both files have the recorded lengths (a journal longer than its
        record holds an increment whose load was not recorded: unknown). None: unknown."""
        meta = self.read_json(self.nft_current_meta) or {}
        base = meta.get("base", meta.get("bytes"))  # "bytes": the record before the journal
        journal = meta.get("journal", 0)
        if not isinstance(base, int) or not isinstance(journal, int):
            return None
        try:
            if self.nft_current.stat().st_size != base:
                return None
            if self.nft_journal.stat().st_size != journal:
                return None
        except FileNotFoundError:
            if journal:
                return None
        return base, journal

    def nft_current_valid(self) -> bool:
        return self.nft_record() is not None

    def set_nft_current(
        self, source: Path | None, journal: bytes = b"", *, move: bool = False
    ) -> None:
        """The base := `source` (renamed when `move`, else hard-linked or copied: both are only
        ever replaced, never changed in place), the journal := `journal`; None: forget both."""
        self.nft_current_meta.unlink(missing_ok=True)
        if source is None:
            self.nft_current.unlink(missing_ok=True)
            self.nft_journal.unlink(missing_ok=True)
            return
        tmp = self.nft_current.with_name("nft.current.tmp")
        tmp.unlink(missing_ok=True)
        if move:
            os.replace(source, tmp)
        else:
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
        os.replace(tmp, self.nft_current)
        # A new journal file: the rollback points keep their links to the old one.
        self.write_file(self.nft_journal, journal.decode("utf-8"))
        self.write_json(self.nft_current_meta,
                        {"base": self.nft_current.stat().st_size, "journal": len(journal)})  # fmt: skip

    def journal_begin(self, text: str) -> tuple[int, int, int] | None:
        """Append an increment after the journal's recorded end, before it is loaded: until
        `journal_end` records it, the journal is longer than its record, so a death in between
        leaves the record unknown (the next rollback point is a dump). None: no known base."""
        record = self.nft_record()
        if record is None:
            self.set_nft_current(None)
            return None
        base, journal = record
        data = (text if text.endswith("\n") else text + "\n").encode("utf-8")
        fd = os.open(self.nft_journal, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, data, journal)
        finally:
            os.close(fd)
        return base, journal, journal + len(data)

    def journal_end(self, begun: tuple[int, int, int] | None, *, loaded: bool) -> None:
        """The increment was loaded (the record grows by it) or refused (the journal is cut
        back to its record; a rollback point only ever reads up to its own, shorter, length)."""
        if begun is None:
            return
        base, journal, grown = begun
        if loaded:
            self.write_json(self.nft_current_meta, {"base": base, "journal": grown})
        else:
            os.truncate(self.nft_journal, journal)

    def compact_nft_journal(self) -> None:
        """Fold a long journal into a new base (after an answer: nothing waits for it)."""
        record = self.nft_record()
        if record is None or record[1] < JOURNAL_COMPACT_BYTES:
            return
        tmp = self.run_dir / "nft.compact.tmp"
        with open(tmp, "wb") as out:
            with open(self.nft_current, "rb") as base:
                shutil.copyfileobj(base, out)
            with open(self.nft_journal, "rb") as journal:
                out.write(journal.read(record[1]))
        self.set_nft_current(tmp, move=True)

    def read_tc_current(self) -> str | None:
        try:
            return self.tc_current.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    # ---- the confirm timer: a detached process, so it outlives the agent and the connection
    def internal_argv(self, words: list[str]) -> list[str]:
        """The agent started again as a detached helper of its own (the timer, the Kea path)."""
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
            "--run-dir",
            str(self.run_dir),
        ]
        if self.artefacts_file is not None:
            argv += ["--artefacts", str(self.artefacts_file)]
        return [*argv, *words]

    def timer_argv(self, token: str) -> list[str]:
        return self.internal_argv(["--internal-rollback-timer", token])

    def arm_timer(self, token: str) -> int:
        """Start the timer (`spawn_internal`)."""
        return self.spawn_internal(["--internal-rollback-timer", token])

    def spawn_internal(self, words: list[str]) -> int:
        """Start a detached helper: posix_spawn (vfork: no copy of the agent's page tables,
        ~0.3 ms where fork + exec of a large agent takes milliseconds), its own session, stdio
        on /dev/null; every other descriptor of the agent is close-on-exec (PEP 446)."""
        reap_timers()
        pid = os.posix_spawn(
            sys.executable,
            self.internal_argv(words),
            TOOL_ENV,
            file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, flags, 0)
                          for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))],
            setsid=True,
        )  # fmt: skip
        _TIMERS.append(pid)
        return pid

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
    for pid in list(_TIMERS):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _TIMERS.remove(pid)
