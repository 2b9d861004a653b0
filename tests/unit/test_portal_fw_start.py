"""How the firewall helper starts: the launcher `portal-fw` runs portal_fw.py from cached
bytecode without site-packages, and the helper runs itself again (its rollback timer) the same
way, or from its own file where a host installed that file alone as /usr/local/sbin/portal-fw."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.unit.test_portal_ha import REPO, load

FIREWALL = REPO / "deploy" / "firewall"
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # no SSH_*: a local call


def helper_help(command: list[str], state: Path) -> dict:
    out = subprocess.run(
        [*command, "--state-dir", str(state), "--host-name", "x", "help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_launcher_and_the_timer_command_run_the_helper(tmp_path):
    answer = helper_help([str(FIREWALL / "portal-fw")], tmp_path / "state")
    assert answer["ok"]
    assert "apply-bundle" in answer["verbs"]
    assert (FIREWALL / "__pycache__").is_dir()  # the module ran from bytecode it cached
    fw = load("portal_fw_start_test", FIREWALL / "portal_fw.py")
    assert fw.SELF_COMMAND[1:3] == ("-I", "-S")
    assert helper_help(list(fw.SELF_COMMAND), tmp_path / "state")["ok"]


def test_a_helper_installed_as_one_file_runs_its_timer_from_that_file(tmp_path):
    single = tmp_path / "sbin" / "portal-fw"
    single.parent.mkdir()
    shutil.copy(FIREWALL / "portal_fw.py", single)
    fw = load("portal_fw_single_file_test", single)
    assert fw.SELF_COMMAND[-1] == str(single.resolve())
    assert helper_help(list(fw.SELF_COMMAND), tmp_path / "state")["ok"]
