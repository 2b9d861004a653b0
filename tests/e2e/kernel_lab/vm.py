"""Host side of the kernel-lab tests: every case in one boot of Debian's kernel.

A case is a shell script run inside the VM (after `. /lab/lab.sh`) with files of its own (the
compiled rule sets). `run_all` writes every case into one directory, boots the lab once
(deploy/kernel-lab/kernel_lab.py), runs the cases one after another (each bounded, the
namespaces removed after each) and splits the output back per case. `start` does the same in a
background thread, so the rest of the suite runs while the VM boots and works.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
LAB_SH = Path(__file__).with_name("lab.sh")
KERNEL_LAB = ROOT / "deploy" / "kernel-lab" / "kernel_lab.py"
# The host package and its HA hook, as /lab/portal-fw/ inside (keepalived's notify program in
# the HA case; Debian's Python 3.11 is in the VM's image).
HOST_PACKAGE = ROOT / "deploy" / "firewall"


def kernel_lab_module() -> ModuleType:
    """deploy/kernel-lab/kernel_lab.py (a script directory, not a package)."""
    name = "portal_kernel_lab"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, KERNEL_LAB)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    files: dict[str, str] = field(default_factory=dict)
    timeout: int = 60


@dataclass
class Result:
    status: int
    output: str
    seconds: float

    def values(self) -> dict[str, str]:
        """The case's `key=value` lines (the last one of a key wins)."""
        return dict(re.findall(r"^([a-z0-9_]+)=(.*)$", self.output, re.M))

    def block(self, name: str) -> str:
        m = re.search(rf"^---- begin {re.escape(name)}\n(.*?)^---- end$", self.output, re.M | re.S)
        return m.group(1) if m else ""


@dataclass
class Run:
    """One boot: each case's result, the whole output, and the timings."""

    results: dict[str, Result]
    status: int
    output: str
    boot_seconds: float
    total_seconds: float
    error: str = ""
    setup_seconds: float = 0.0


# The topology is built once (creating namespaces is slow in emulation) and reset between cases.
DRIVER = """\
. /lab/lab.sh
. /lab/setup.sh
echo "setup_done=$(cut -d' ' -f1 /proc/uptime)"
for case in {names}; do
    echo "==== CASE $case"
    start=$(cut -d' ' -f1 /proc/uptime)
    ( cd /lab/cases/$case && timeout -s KILL $(cat timeout) sh -c '. /lab/lab.sh; . ./case.sh' ) 2>&1
    rc=$?
    reset_lab >/dev/null 2>&1
    end=$(cut -d' ' -f1 /proc/uptime)
    echo "==== END $case $rc $start $end"
done
teardown >/dev/null 2>&1
"""


def run_all(cases: list[Case], setup: str = "", timeout: float = 420) -> Run:
    """Boot once, run `setup` (shell, after lab.sh), then every case; split the output."""
    lab = kernel_lab_module()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernel-lab-cases-") as tmp:
        d = Path(tmp)
        shutil.copy2(LAB_SH, d / "lab.sh")
        (d / "setup.sh").write_text(setup)
        shutil.copytree(
            HOST_PACKAGE / "portal_fw",
            d / "portal-fw" / "portal_fw",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        shutil.copy2(HOST_PACKAGE / "portal-ha", d / "portal-fw" / "portal-ha")
        for case in cases:
            cd = d / "cases" / case.name
            cd.mkdir(parents=True)
            (cd / "case.sh").write_text(case.script)
            (cd / "timeout").write_text(str(case.timeout))
            for name, text in case.files.items():
                (cd / name).write_text(text)
        (d / "run.sh").write_text(DRIVER.format(names=" ".join(c.name for c in cases)))
        try:
            status, output = lab.run(d, timeout=timeout)
        except lab.LabError as exc:
            return Run({}, 2, "", 0.0, time.monotonic() - started, str(exc))
    # The whole output of the last run, for reading after the tests (every case's blocks).
    with contextlib.suppress(OSError):
        (lab.CACHE / "last-run.log").write_text(output)
    results: dict[str, Result] = {}
    for m in re.finditer(
        r"^==== CASE (\S+)\n(.*?)^==== END \1 (\d+) ([\d.]+) ([\d.]+)$", output, re.M | re.S
    ):
        results[m.group(1)] = Result(
            int(m.group(3)), m.group(2), float(m.group(5)) - float(m.group(4))
        )
    boot = re.search(r"up at ([\d.]+) s", output)
    setup_done = re.search(r"^setup_done=([\d.]+)$", output, re.M)
    return Run(
        results,
        status,
        output,
        float(boot.group(1)) if boot else 0.0,
        time.monotonic() - started,
        setup_seconds=float(setup_done.group(1)) - float(boot.group(1))
        if boot and setup_done
        else 0.0,
    )


class Background:
    """`run_all` in a thread, started as soon as the suite knows it needs the lab."""

    def __init__(self, cases: list[Case], setup: str = "") -> None:
        self._cases = cases
        self._setup = setup
        self._run: Run | None = None
        self._thread = threading.Thread(target=self._work, name="kernel-lab", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self._run = run_all(self._cases, self._setup)
        except Exception as exc:  # reported to every kernel-lab test
            self._run = Run({}, 2, "", 0.0, 0.0, f"{type(exc).__name__}: {exc}")

    def result(self, timeout: float = 400) -> Run:
        self._thread.join(timeout)
        if self._run is None:
            return Run({}, 2, "", 0.0, 0.0, f"the kernel lab did not finish within {timeout} s")
        return self._run
