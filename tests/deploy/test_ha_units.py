"""What deploy/ ships for the HA pair's daemons: Debian's units with our drop-ins verify, start
after the network, restart without a limit, and remove the stale lock the generated
conntrackd.conf names ("conntrackd did not start after the reboot")."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workers.ruleset import Ha, Host, Policy, Snapshot
from workers.ruleset.ha import conntrackd_config

REPO = Path(__file__).resolve().parents[2]
DROPINS = REPO / "deploy" / "firewall" / "systemd"


@pytest.mark.parametrize("daemon", ["conntrackd", "keepalived"])
def test_the_units_with_our_drop_ins_verify(daemon, tmp_path):
    unit = Path(f"/lib/systemd/system/{daemon}.service")
    if not unit.exists() or not shutil.which("systemd-analyze"):
        pytest.fail(f"{unit} or systemd-analyze missing: make test installs {daemon} and systemd")
    shutil.copy(unit, tmp_path / unit.name)
    (tmp_path / f"{unit.name}.d").mkdir()
    dropin = (DROPINS / f"{daemon}.service.d-portal.conf").read_text()
    (tmp_path / f"{unit.name}.d" / "portal.conf").write_text(dropin)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / unit.name)],
        capture_output=True, text=True, env={"SYSTEMD_UNIT_PATH": f"{tmp_path}:", "PATH": "/usr/bin:/bin"},
        timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "portal.conf" not in result.stderr, result.stderr  # no ignored key in ours
    assert "After=network-online.target" in dropin
    assert "Restart=always" in dropin
    assert "StartLimitIntervalSec=0" in dropin


def test_the_drop_in_removes_the_lock_the_generated_config_uses():
    ha = Ha(sync_interface="sync0", local4="10.255.254.1", peer4="10.255.254.2",
            addresses4=(("dorm0", "10.100.0.1/16"),))  # fmt: skip
    host = Host(name="fw1", uplink_interfaces=("inet0",), member_interfaces=("dorm0",))
    text = conntrackd_config(Snapshot(policy=Policy(), host=host, ha=ha))
    lock = re.search(r"LockFile (\S+)", text).group(1)
    config_path = re.search(r"ExecStart=/usr/sbin/conntrackd -C (\S+)", (DROPINS / "conntrackd.service.d-portal.conf").read_text()).group(1)  # fmt: skip
    dropin = (DROPINS / "conntrackd.service.d-portal.conf").read_text()
    assert f"ExecStartPre=-/bin/rm -f {lock}" in dropin
    assert config_path == ha.conntrackd_config
