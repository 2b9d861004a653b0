"""deploy/install.sh firewall: the host side installed as deploy/firewall/README.md says, and an
upgrade over the helper from before the agent (files in /usr/local/sbin)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINTS = ("portal-fw", "portal-ha", "portal-ra", "kea-ctl")


def install(tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "deploy" / "install.sh"), "firewall", "--lib", str(tmp / "lib"),
         "--sbin", str(tmp / "sbin"), "--state", str(tmp / "state")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_package_its_entry_points_and_an_upgrade_over_the_old_helper(tmp_path):
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    for name in (*ENTRY_POINTS, "portal_fw.py"):  # the helper before the agent: plain files
        (sbin / name).write_text("# old\n")
    (sbin / "__pycache__").mkdir()
    (sbin / "__pycache__" / "portal_fw.cpython-311.pyc").write_bytes(b"old")
    result = install(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agent 1 installed" in result.stdout
    for name in ENTRY_POINTS:
        assert os.readlink(sbin / name) == str(tmp_path / "lib" / name)
        assert os.access(tmp_path / "lib" / name, os.X_OK)
    assert not (sbin / "portal_fw.py").exists()
    assert not list((sbin / "__pycache__").glob("portal_fw.*"))
    package = tmp_path / "lib" / "portal_fw"
    assert (package / "agent.py").stat().st_mode & 0o777 == 0o644
    assert list((package / "__pycache__").glob("agent.*.pyc"))  # compiled once, at install
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    again = install(tmp_path)  # an upgrade to the same release changes nothing that runs
    assert again.returncode == 0, again.stderr
    assert not list(tmp_path.glob("lib.*"))  # no half-switched directory left
    answer = subprocess.run(
        [str(sbin / "portal-fw"), "--state-dir", str(tmp_path / "state"), "help"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["verbs"]["apply-bundle"]["input"] is True
