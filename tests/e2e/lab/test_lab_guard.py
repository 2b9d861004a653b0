"""The lab tests never replace a lab that a running `make run` uses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_support import make_run_pid

pytestmark = pytest.mark.lab  # (needs no lab itself; it guards the lab fixture)


def test_a_running_make_run_is_recognised_and_a_stale_pid_file_is_not(tmp_path):
    pid_file = tmp_path / "make-run.pid"
    assert make_run_pid(pid_file) is None  # no file
    # A process that looks like run.sh's honcho (its command line names honcho).
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "honcho"])
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 5
        while b"honcho" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd its program
        pid_file.write_text(f"{proc.pid}\n")
        assert make_run_pid(pid_file) == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert make_run_pid(pid_file) is None  # the process is gone: a stale file
    pid_file.write_text(f"{subprocess.Popen(['true']).pid}")  # another program: not make run
    assert make_run_pid(pid_file) is None
    pid_file.write_text("garbage")
    assert make_run_pid(pid_file) is None
