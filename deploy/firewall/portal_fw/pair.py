"""The pair's state on this host: VRRP state per instance (what keepalived's notify hook
recorded), whether keepalived and conntrackd run, conntrackd's sync statistics, and the
operator's priority files that are set (an operator moved a role: `lab.sh failover`, `role`). The agent reads
it in-process (health, apply-bundle); `portal-ha status` prints it.

Also what reading it needs and ha.py (the program portal-ha) shares: running conntrackd and
reading the state files its notify verb writes. This module imports nothing of ha.py."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from pathlib import Path

from .common import JSON

INSTANCES = ("ipv4", "ipv6")
TIMEOUT = 60

STAT_RE = {
    "internal_active": r"cache internal:\s*\ncurrent active connections:\s*(\d+)",
    "external_active": r"cache external:\s*\ncurrent active connections:\s*(\d+)",
    "external_created_failed": r"cache external:(?:.*\n){2}connections created:\s*\d+\s*failed:\s*(\d+)",
    "sent_packets": r"(\d+) Pckts sent",
    "received_packets": r"(\d+) Pckts recv",
    "send_errors": r"(\d+) Error send",
    "receive_errors": r"(\d+) Error recv",
    "lost_messages": r"(\d+) Lost msgs",
    "malformed_messages": r"(\d+) Malformed msgs",
}


def run(argv: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """A tool's result, never an exception: a missing tool exits 127, one that timed out 124."""
    try:
        return subprocess.run(  # noqa: S603 - fixed argv, never a shell
            argv, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {exc}")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: timed out")


def conntrackd(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(["conntrackd", "-C", str(conf), *args])


def read_states(run_dir: Path) -> dict[str, JSON]:
    """{instance: {"state", "since", "priority"}} as keepalived's notify hook recorded them."""
    states: dict[str, JSON] = {}
    for name in INSTANCES:
        try:
            states[name] = json.loads((run_dir / f"state-{name}.json").read_text())
        except (OSError, ValueError):
            continue
    return states


def keepalived_running() -> bool:
    """A keepalived process in this network namespace (a lab's hosts share one /proc)."""
    try:
        mine = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "keepalived":
                continue
            if os.stat(entry / "ns" / "net").st_ino == mine:
                return True
        except OSError:
            continue
    return False


def transition_running(run_dir: Path) -> bool:
    """Whether keepalived's notify hook is driving conntrackd through a transition now (it
    holds notify.lock for its steps: commit, flush, resync, bulk send, the events settling).
    Meanwhile the two hosts' caches are being refilled and their counts say nothing yet."""
    try:
        handle = open(run_dir / "notify.lock")  # noqa: SIM115 - closed below
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def operator_priorities(run_dir: Path) -> dict[str, int]:
    """{"ipv4": -254, ...}: the priority files (keepalived's track_file, beside the state files)
    an operator set to anything but 0; -254 puts that instance into FAULT (a priority failover),
    a lower value only below the peer's."""
    found = {}
    for family in ("ipv4", "ipv6"):
        try:
            value = int((run_dir / f"priority-{family}").read_text().strip() or 0)
        except (OSError, ValueError):
            continue
        if value:
            found[family] = value
    return found


def status(conf: Path, run_dir: Path) -> JSON:
    stats = conntrackd(conf, "-s")
    running = stats.returncode == 0
    alive = keepalived_running()
    instances = read_states(run_dir)
    if not alive:  # the files say what it was: without keepalived this host holds no role
        instances = {name: {**s, "state": "STOPPED"} for name, s in instances.items()}
    answer: JSON = {
        "instances": instances,
        "keepalived": {"running": alive},
        "conntrackd": {"running": running},
        "operator_priority": operator_priorities(run_dir),
        "transition_running": transition_running(run_dir),
    }
    if running:
        values = {}
        for key, pattern in STAT_RE.items():
            match = re.search(pattern, stats.stdout)
            if match:
                values[key] = int(match.group(1))
        answer["conntrackd"]["stats"] = values
    return answer
