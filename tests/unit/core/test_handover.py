"""The handover supervisor (apps/infra/handover.py) with real processes: each child is a small
Python program that speaks the worker's side of the protocol (`handover_ready`) and writes what
happens to it into a shared journal, so the order of start, warm, go and stop is visible. The
real firewall worker under the supervisor: tests/integration/firewall/test_handover_worker.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from apps.infra.handover import _generation_args

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from apps.infra.handover import handover_ready
journal, warm_seconds = sys.argv[1], float(sys.argv[2])
gen = os.environ["PORTAL_HANDOVER_GENERATION"]
def note(what):
    with open(journal, "a") as f:
        f.write(f"{{time.monotonic():.4f}} {{gen}} {{what}}\\n")
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
note("start")
if gen == os.environ.get("DIE_GENERATION"):
    note("died")
    sys.exit(3)
time.sleep(warm_seconds if gen != "1" else 0.1)
note("warm")
handover_ready()
note("go")
while not stopping:
    time.sleep(0.05)
time.sleep(0.3)  # the task it runs, finished before it exits (warm shutdown)
note("stopped")
"""


def journal_events(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()[1:3]) for line in path.read_text().splitlines()]


def wait_for(path: Path, event: tuple[str, str], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if event in journal_events(path):
            return True
        time.sleep(0.05)
    return False


def supervisor(tmp_path: Path, warm_seconds: float, env: dict[str, str] | None = None):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    journal = tmp_path / "journal"
    proc = subprocess.Popen(
        [sys.executable, "-m", "apps.infra.handover", "--pidfile", str(tmp_path / "pid"), "--",
         sys.executable, str(script), str(journal), str(warm_seconds)],
        cwd=ROOT, env=dict(os.environ, **(env or {})),
        stderr=open(tmp_path / "supervisor.log", "w"),  # noqa: SIM115
    )  # fmt: skip
    return proc, journal


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def test_the_old_worker_stops_only_after_the_new_one_is_warm(tmp_path):
    proc, journal = supervisor(tmp_path, warm_seconds=1.0)
    try:
        assert wait_for(journal, ("1", "go"))
        assert (tmp_path / "pid").read_text().strip() == str(proc.pid)
        proc.send_signal(signal.SIGHUP)  # systemctl reload portal-firewall
        assert wait_for(journal, ("2", "go"))
        events = journal_events(journal)
        order = [e for e in events if e[1] != "start"]
        # The old one serves while the new one warms; it is told to stop only then, and the
        # new one takes tasks only once the old one has finished and exited.
        assert order == [("1", "warm"), ("1", "go"), ("2", "warm"), ("1", "stopped"), ("2", "go")]
        assert proc.poll() is None  # the supervisor stays, with the new worker
    finally:
        assert stop(proc) == 0
    assert ("2", "stopped") in journal_events(journal)
    assert not (tmp_path / "pid").exists()


def test_a_new_worker_that_dies_before_it_is_warm_leaves_the_old_one_serving(tmp_path):
    proc, journal = supervisor(tmp_path, warm_seconds=0.5, env={"DIE_GENERATION": "2"})
    try:
        assert wait_for(journal, ("1", "go"))
        proc.send_signal(signal.SIGHUP)
        assert wait_for(journal, ("2", "died"))
        time.sleep(1.0)
        assert ("1", "stopped") not in journal_events(journal)
        assert proc.poll() is None
        assert "reload failed" in (tmp_path / "supervisor.log").read_text()
        proc.send_signal(signal.SIGHUP)  # a later reload works (generation 3)
        assert wait_for(journal, ("3", "go"))
        assert ("1", "stopped") in journal_events(journal)
    finally:
        stop(proc)


def test_a_later_worker_never_purges_the_queue_and_has_a_node_name_of_its_own():
    command = ["celery", "-A", "portal", "worker", "-Q", "firewall", "--purge",
               "--hostname", "firewall@%h", "-l", "INFO"]  # fmt: skip
    assert _generation_args(command, 1) == command
    assert _generation_args(command, 2) == [
        "celery", "-A", "portal", "worker", "-Q", "firewall", "--hostname", "firewall-2@%h",
        "-l", "INFO",
    ]  # fmt: skip
