"""keepalived's notify hook and conntrackd's keeper on a firewall of an HA pair.

The entry point `portal-ha` (a launcher beside the package) runs `main`; the agent reads the
pair's status in-process from pair.py, which this program builds on (never the reverse). The portal's bundle carries keepalived.conf
and conntrackd.conf (workers/ruleset/ha.py); the host's ``--artefacts`` declaration names this
program to check and reload them. Verbs:

  notify CONNTRACKD_CONF RUN_DIR TYPE NAME STATE [PRIORITY]
        keepalived's hook (it appends TYPE NAME STATE PRIORITY). Records the instance's state in
        RUN_DIR/state-NAME.json for health, then drives conntrackd as conntrack-tools'
        primary-backup.sh does: becoming primary commits the external cache into the kernel
        (the peer's connections, NAT included), flushes the caches, resyncs the internal cache
        from the kernel and bulk-sends it to the peer, and, while the peer is still primary for
        the other family, asks it for a full resync (the flush emptied the external cache of
        the peer's states too, issue 25); once the kernel's events about the commit are quiet
        it resyncs the internal cache and bulk-sends again (the commit replaced connections the
        kernel already had, and their late destroy events dropped live ones from the internal
        cache, issue 25). Becoming backup asks the peer for a full resync.
        Kernel timers are shortened (-t, purge zombies) only when the host holds no role at all
        (each host of our pair is primary for one family). Serialised by a lock.
  check-keepalived FILE                 keepalived -t -f FILE
  check-conntrackd FILE                 conntrackd parses FILE (client mode; FT-FW sync needed)
  reload-keepalived FILE RUN_DIR [--unit UNIT]
        SIGHUP to the running keepalived (or start it); with --unit: systemctl reload-or-restart
  reload-conntrackd FILE RUN_DIR [--unit UNIT]
        restart conntrackd only when FILE differs from what it runs (a restart empties its
        caches; StartupResync refills them from the peer); with --unit through systemd
  status CONNTRACKD_CONF RUN_DIR        JSON: VRRP state per instance, conntrackd statistics
  resync CONNTRACKD_CONF                ask the peer for a full resync now (conntrackd -n)

Arguments are never passed to a shell.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .pair import INSTANCES, STAT_RE, conntrackd, read_states, run, status

STATES = ("MASTER", "BACKUP", "FAULT", "STOP")
PATH_RE = re.compile(r"/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*")
UNIT_RE = re.compile(r"[A-Za-z0-9@_.-]{1,64}")


class Refused(Exception):
    pass


def path_arg(value: str, what: str) -> Path:
    if not PATH_RE.fullmatch(value) or "/../" in value or len(value) > 200:
        raise Refused(f"{what}: {value!r} is not a safe absolute path")
    return Path(value)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def log(run_dir: Path, message: str) -> None:
    with contextlib.suppress(OSError), open(run_dir / "notify.log", "a", encoding="utf-8") as fh:
        fh.write(f"{now_iso()} {message}\n")


# After a commit, the destroy events of the connections it replaced must all have reached
# conntrackd before the internal cache is read again (-R): one that arrives later drops a live
# connection from it. The kernel keeps a connection whose destroy event no listener had room for
# on its redelivery list (`conntrack -L dying`) and re-sends it later (after ~1 s, later still on
# a busy host); once that list is empty, what remains is conntrackd reading its socket: its event
# counter standing still for SETTLE_QUIET. At most SETTLE_MAX in all (a busy host is never quiet).
SETTLE_QUIET, SETTLE_MAX = 0.5, 15.0  # seconds


def events_received(conf: Path) -> int | None:
    match = re.search(r"events received:\s*(\d+)", conntrackd(conf, "-s", "runtime").stdout)
    return int(match.group(1)) if match else None


def awaiting_redelivery() -> int | None:
    """Connections the kernel destroyed whose destroy event it still has to deliver (its
    redelivery list); None when the kernel or the tool cannot list them."""
    waiting = 0
    for family in ("ipv4", "ipv6"):
        result = run(["conntrack", "-L", "dying", "-f", family])
        if result.returncode != 0:
            return None
        waiting += sum(1 for line in result.stdout.splitlines() if line.strip())
    return waiting


def events_settle(conf: Path) -> tuple[float, int, int | None]:
    """Wait until the kernel has delivered every destroy event (its redelivery list is empty)
    and conntrackd has received no event for SETTLE_QUIET seconds, at most SETTLE_MAX.
    Returns the seconds waited, the events received meanwhile and the most connections seen
    waiting for redelivery (None: the kernel cannot list them; then only the quiet counts,
    for at least 1.2 s: the kernel's first redelivery comes about a second after the loss)."""
    started = time.monotonic()
    first = last = events_received(conf)
    quiet_since = started
    most_waiting: int | None = None
    while time.monotonic() - started < SETTLE_MAX:
        waiting = awaiting_redelivery()
        if waiting is not None:
            most_waiting = max(most_waiting or 0, waiting)
        time.sleep(0.1)
        now = events_received(conf)
        if now != last or waiting:
            last, quiet_since = now, time.monotonic()
            continue
        quiet = time.monotonic() - quiet_since
        if quiet >= (SETTLE_QUIET if waiting is not None else 1.2):
            break
    return time.monotonic() - started, (last or 0) - (first or 0), most_waiting


# ------------------------------------------------------------------------------------- notify
def verb_notify(argv: list[str]) -> int:
    if len(argv) < 5:
        raise Refused("usage: notify CONNTRACKD_CONF RUN_DIR TYPE NAME STATE [PRIORITY]")
    conf = path_arg(argv[0], "conntrackd config")
    run_dir = path_arg(argv[1], "run dir")
    kind, name, state = argv[2], argv[3], argv[4]
    priority = argv[5] if len(argv) > 5 and argv[5].isdigit() else None
    if kind != "INSTANCE" or name not in INSTANCES or state not in STATES:
        raise Refused(f"notify: unexpected {kind} {name} {state}")
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "notify.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_atomic(
            run_dir / f"state-{name}.json",
            json.dumps({"state": state, "since": now_iso(), "priority": priority}),
        )
        log(run_dir, f"{name} -> {state} (priority {priority})")
        if conntrackd(conf, "-s", "runtime").returncode != 0:
            log(run_dir, "conntrackd is not running: no state to commit or resync")
            return 0
        others = [s.get("state") for n, s in read_states(run_dir).items() if n != name]
        holds_a_role = state == "MASTER" or "MASTER" in others
        steps: list[tuple[str, ...]] = []
        if state == "MASTER":
            steps = [("-c",), ("-f",), ("-R",), ("-B",)]
            if any(s != "MASTER" for s in others):
                # The peer is still primary for the other family: -f emptied the external
                # cache of its states too, and it sends them again only when asked (the resync
                # our own backup transition asked for arrived before this flush): ask again.
                steps.append(("-n",))
            # -c replaced every connection the kernel already had (EEXIST: destroy, create).
            # The kernel delivers the destroy events conntrackd's socket had no room for
            # later (reliable events), after -R read the new entries, and conntrackd drops
            # those from its internal cache: read the kernel again once the events are quiet
            # and send the peer everything again (issue 25).
            steps += [("settle",), ("-R",), ("-B",)]
        elif state == "BACKUP":
            steps = [("-n",)] if holds_a_role else [("-t",), ("-n",)]
        elif state == "FAULT" and not holds_a_role:
            steps = [("-t",)]
        for step in steps:
            if step == ("settle",):
                waited, events, waiting = events_settle(conf)
                held = re.search(STAT_RE["internal_active"], conntrackd(conf, "-s").stdout)
                log(
                    run_dir,
                    f"kernel events settled after {waited:.2f} s ({events} received, at most "
                    f"{'?' if waiting is None else waiting} awaiting redelivery); internal "
                    f"cache holds {held.group(1) if held else '?'} before the resync",
                )
                continue
            started = time.monotonic()
            result = conntrackd(conf, *step)
            took = round((time.monotonic() - started) * 1000)
            detail = (result.stderr or result.stdout).strip().replace("\n", " ")[-300:]
            log(
                run_dir,
                f"conntrackd {' '.join(step)}: exit {result.returncode} in {took} ms {detail}",
            )
    return 0


# --------------------------------------------------------------------------------- check/reload
def verb_check_keepalived(argv: list[str]) -> int:
    file = path_arg(argv[0], "file")
    result = run(["keepalived", "-t", "-f", str(file)])
    sys.stderr.write(result.stderr + result.stdout)
    return 0 if result.returncode == 0 else 1


def verb_check_conntrackd(argv: list[str]) -> int:
    file = path_arg(argv[0], "file")
    text = file.read_text(encoding="utf-8")
    if not re.search(r"^\s*Mode\s+FTFW\b", text, re.M):
        sys.stderr.write("conntrackd: the configuration has no FT-FW sync (Mode FTFW)\n")
        return 1
    result = conntrackd(file, "-s", "runtime")
    output = result.stderr + result.stdout
    if "parsing config file" in output or "can't open config" in output:
        sys.stderr.write(output)
        return 1
    return 0


def pid_of(pid_file: Path, comm: str) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        if Path(f"/proc/{pid}/comm").read_text().strip() != comm:
            return None
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return None
        return pid
    except (OSError, ValueError, IndexError):
        return None


def unit_option(argv: list[str]) -> tuple[list[str], str | None]:
    if "--unit" in argv:
        i = argv.index("--unit")
        unit = argv[i + 1] if i + 1 < len(argv) else ""
        if not UNIT_RE.fullmatch(unit):
            raise Refused(f"--unit: {unit!r} is not a unit name")
        return argv[:i] + argv[i + 2 :], unit
    return argv, None


def verb_reload_keepalived(argv: list[str]) -> int:
    argv, unit = unit_option(argv)
    file, run_dir = path_arg(argv[0], "file"), path_arg(argv[1], "run dir")
    if unit:
        result = run(["systemctl", "reload-or-restart", unit])
        sys.stderr.write(result.stderr)
        return result.returncode
    run_dir.mkdir(parents=True, exist_ok=True)
    pid = pid_of(run_dir / "keepalived.pid", "keepalived")
    if pid is not None:
        os.kill(pid, signal.SIGHUP)
        return 0
    # Without systemd (the lab) there may be no syslog: keepalived stays in the foreground of
    # its own session and writes its log to RUN_DIR/keepalived.log.
    with open(run_dir / "keepalived.log", "ab") as log:
        subprocess.Popen(  # noqa: S603 - fixed argv, paths validated above
            [  # noqa: S607 - keepalived from the host's PATH
                "keepalived", "-f", str(file), "-p", str(run_dir / "keepalived.pid"),
                "-r", str(run_dir / "vrrp.pid"), "-c", str(run_dir / "checkers.pid"),
                "--dont-fork", "--log-console", "--log-detail",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    for _ in range(50):
        if pid_of(run_dir / "keepalived.pid", "keepalived") is not None:
            return 0
        time.sleep(0.1)
    sys.stderr.write("keepalived did not start\n")
    return 1


def conntrackd_running(conf: Path) -> bool:
    return conntrackd(conf, "-s", "runtime").returncode == 0


def verb_reload_conntrackd(argv: list[str]) -> int:
    argv, unit = unit_option(argv)
    file, run_dir = path_arg(argv[0], "file"), path_arg(argv[1], "run dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    running_copy = run_dir / "conntrackd.running.conf"
    text = file.read_text(encoding="utf-8")
    try:
        same = running_copy.read_text(encoding="utf-8") == text
    except OSError:
        same = False
    if same and conntrackd_running(file):
        return 0  # unchanged: keep its caches
    if unit:
        result = run(["systemctl", "restart", unit])
        if result.returncode != 0:
            sys.stderr.write(result.stderr)
            return result.returncode
    else:
        old = running_copy if running_copy.exists() else file
        if conntrackd_running(old):
            conntrackd(old, "-k")
            for _ in range(50):
                if not conntrackd_running(old):
                    break
                time.sleep(0.1)
        with contextlib.suppress(OSError):
            (run_dir / "conntrackd.lock").unlink()  # a stale lock stops the start (see docs/ha.md)
        result = run(["conntrackd", "-C", str(file), "-d"])
        if result.returncode != 0:
            sys.stderr.write(result.stderr + result.stdout)
            return 1
    for _ in range(50):
        if conntrackd_running(file):
            shutil.copyfile(file, running_copy)
            return 0
        time.sleep(0.1)
    sys.stderr.write("conntrackd did not start\n")
    return 1


def verb_status(argv: list[str]) -> int:
    conf, run_dir = path_arg(argv[0], "conntrackd config"), path_arg(argv[1], "run dir")
    sys.stdout.write(json.dumps(status(conf, run_dir), sort_keys=True) + "\n")
    return 0


def verb_resync(argv: list[str]) -> int:
    conf = path_arg(argv[0], "conntrackd config")
    result = conntrackd(conf, "-n")
    sys.stderr.write(result.stderr)
    return 0 if result.returncode == 0 else 1


VERBS: dict[str, tuple[Callable[[list[str]], int], int]] = {
    "notify": (verb_notify, 5),
    "check-keepalived": (verb_check_keepalived, 1),
    "check-conntrackd": (verb_check_conntrackd, 1),
    "reload-keepalived": (verb_reload_keepalived, 2),
    "reload-conntrackd": (verb_reload_conntrackd, 2),
    "status": (verb_status, 2),
    "resync": (verb_resync, 1),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in VERBS:
        sys.stderr.write(f"usage: portal-ha {{{','.join(VERBS)}}} ...\n")
        return 2
    verb, minimum = VERBS[argv[0]]
    if len(argv) - 1 < minimum:
        sys.stderr.write(f"portal-ha {argv[0]}: missing arguments (see portal-ha's docstring)\n")
        return 2
    try:
        return verb(argv[1:])
    except Refused as exc:
        sys.stderr.write(f"portal-ha: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"portal-ha {argv[0]}: {exc}\n")
        return 1
