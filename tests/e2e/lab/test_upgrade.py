"""An upgrade from the helper before the agent, in the lab, by deploy/firewall/README.md's steps:
a host runs the old helper (one process per verb; portal_fw.py + launcher in an sbin directory)
with a bundle it applied and confirmed; the portal refuses to push to it, saying what to update;
`deploy/install.sh firewall` over the same directory (the forced command unchanged); the next
push works and keeps the old helper's rollback point and state."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from lab_support import LAB_VAR, REPO, apply, fw, label, ruleset

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost
from apps.firewall.order import ruleset_rollout
from tests.e2e.lab.push_support import version

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

OLD_FILES = ("portal-fw", "portal_fw.py", "portal-ha", "portal-ra", "kea-ctl")
UPGRADE = Path("/run/portal-lab/upgrade")  # root-owned, like /usr/local on a host


# The helper as its last release before the agent (deploy/firewall/ at 3991d54: portal-fw,
# portal_fw.py, portal-ha, portal-ra, kea-ctl), kept as an archive so that the test does not
# depend on the clone's history (CI may clone shallow).
OLD_HELPER = Path(__file__).with_name("old_helper_3991d54.tar.gz")


def old_helper(sbin: Path) -> None:
    """Install the old helper into `sbin` as its README said: the files side by side."""
    sbin.mkdir(parents=True)
    with tarfile.open(OLD_HELPER) as archive:
        for name in OLD_FILES:
            member = archive.extractfile(f"./{name}")
            assert member is not None, name
            (sbin / name).write_bytes(member.read())
            (sbin / name).chmod(0o755 if "." not in name else 0o644)


def test_a_host_with_the_old_helper_is_upgraded_by_the_documented_steps(hosts):
    shutil.rmtree(UPGRADE, ignore_errors=True)
    sbin = UPGRADE / "sbin"
    old_helper(sbin)
    keys = LAB_VAR / "pl-nat1" / "authorized_keys"
    original = keys.read_text()
    # The old helper's declaration: without the Kea path's key and its {loaded} placeholder,
    # which an older helper refuses (the README's step 5 adds them after the upgrade).
    declared = LAB_VAR / "pl-nat1" / "artefacts.json"
    declared_now = declared.read_text()
    old_declared = json.loads(declared_now)
    old_declared["kea-dhcp4"].pop("deferred", None)
    kea_reload = old_declared["kea-dhcp4"]["reload"]
    old_declared["kea-dhcp4"]["reload"] = [w for w in kea_reload if w != "{loaded}"]
    declared.write_text(json.dumps(old_declared))
    current = "/run/portal-lab/lib/portal-fw "
    assert current in original
    try:
        keys.write_text(original.replace(current, f"{sbin}/portal-fw "))
        # The old helper at work, as today's portal drives it (one process per verb).
        assert "agent" not in fw("pl-nat1", "help").data["verbs"]
        assert apply("pl-nat1", ruleset("old-1"), "old-1").rc == 0
        assert fw("pl-nat1", "confirm").rc == 0
        # The new portal refuses to push to it, and says what to do.
        outcomes = ruleset_rollout(versions=[version(h) for h in hosts])
        assert (outcomes[0].host, outcomes[0].ok, outcomes[0].step) == ("pl-nat1", False, "connect")
        host = FirewallHost.objects.get(name="pl-nat1")
        assert host.push_status == PushStatus.ERROR
        assert "update the host" in host.error_reason
        assert fw("pl-nat1", "version").data["version"] == label("old-1")
        # The documented steps: install the host side over the same directories.
        steps = subprocess.run(
            ["bash", str(REPO / "deploy" / "install.sh"), "firewall", "--lib",
             str(UPGRADE / "lib"), "--sbin", str(sbin), "--state", ""],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert steps.returncode == 0, steps.stderr
        assert not (sbin / "portal_fw.py").exists()
        declared.write_text(declared_now)  # step 5
        # The next push works, on top of what the old helper applied.
        outcomes = ruleset_rollout(versions=[version(h) for h in FirewallHost.objects.all()])
        assert all(o.ok for o in outcomes), outcomes
        answer = fw("pl-nat1", "version").data
        assert answer["version"] == version(hosts[0]).content_hash
        assert answer["state"]["confirmed"] is True
        rolled = fw("pl-nat1", "rollback").data  # the point holds what the old helper applied
        assert rolled["version"] == label("old-1")
    finally:
        keys.write_text(original)
        declared.write_text(declared_now)
        shutil.rmtree(UPGRADE, ignore_errors=True)
