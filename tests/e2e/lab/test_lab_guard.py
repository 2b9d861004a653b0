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


OWNER = Path("/run/portal-lab.owner")


def test_a_lab_of_another_running_checkout_is_named_and_one_left_behind_is_rebuilt(lab, tmp_path):
    from lab_support import LAB_VAR, lab_sh

    ours = OWNER.read_text().strip()
    other = tmp_path / "other-clone"
    try:
        # Another checkout whose sshd still runs (it points at our live sshd): refused, named.
        for host in ("pl-nat1", "pl-nat2"):
            (other / "var/lab" / host).mkdir(parents=True)
            (other / "var/lab" / host / "sshd.pid").write_text(
                (LAB_VAR / host / "sshd.pid").read_text()
            )
        OWNER.write_text(f"{other}\n")
        refused = lab_sh("up")
        assert refused.returncode != 0
        assert f"belongs to the checkout {other}" in refused.stderr
        assert lab_sh("status").returncode == 0  # untouched: still up
        # The same checkout gone (its processes dead): up rebuilds the lab for us.
        for host in ("pl-nat1", "pl-nat2"):
            (other / "var/lab" / host / "sshd.pid").write_text("999999999\n")
        rebuilt = lab_sh("up")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert f"left behind by {other}" in rebuilt.stderr
        assert OWNER.read_text().strip() == ours
        assert lab_sh("status").returncode == 0
    finally:
        OWNER.write_text(f"{ours}\n")
