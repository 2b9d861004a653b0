"""portal_fw.ha (entry point portal-ha: keepalived's notify hook, conntrackd's keeper) and the example
artefact declaration for a pair, without a lab: parsing and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from portal_fw import pair
from portal_fw.bundle import load_artefacts

REPO = Path(__file__).resolve().parents[2]
PORTAL_HA = REPO / "deploy" / "firewall" / "portal-ha"


def portal_ha(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PORTAL_HA), *args], capture_output=True, text=True, timeout=30
    )


STATS = """cache internal:
current active connections:	         850
connections created:		        1000	failed:	           0
connections updated:		           0	failed:	           0
connections destroyed:		         150	failed:	           0

cache external:
current active connections:	         349
connections created:		         400	failed:	           2
connections updated:		           0	failed:	           0
connections destroyed:		          51	failed:	           0

UDP traffic (active device=pl-sync):
               93312 Bytes sent                 41472 Bytes recv
                2916 Pckts sent                  1296 Pckts recv
                   0 Error send                    1 Error recv

message tracking:
                   0 Malformed msgs                    7 Lost msgs
"""


def test_the_example_declaration_loads_in_the_helper():
    declared = load_artefacts(REPO / "deploy" / "firewall" / "artefacts.example.json")
    assert {"keepalived", "conntrackd", "kea-dhcp4"} <= set(declared)
    assert declared["conntrackd"].reload[-2:] == ("--unit", "conntrackd")


def test_status_reads_conntrackds_statistics(monkeypatch, tmp_path):
    monkeypatch.setattr(
        pair, "conntrackd", lambda conf, *a: subprocess.CompletedProcess(a, 0, STATS, "")
    )
    monkeypatch.setattr(pair, "keepalived_running", lambda: True)
    (tmp_path / "state-ipv4.json").write_text(json.dumps({"state": "MASTER", "since": "x"}))
    answer = pair.status(tmp_path / "c.conf", tmp_path)
    assert answer["conntrackd"]["stats"] == {
        "internal_active": 850, "external_active": 349, "external_created_failed": 2,
        "sent_packets": 2916, "received_packets": 1296, "send_errors": 0, "receive_errors": 1,
        "lost_messages": 7, "malformed_messages": 0,
    }  # fmt: skip
    assert answer["instances"]["ipv4"]["state"] == "MASTER"
    monkeypatch.setattr(pair, "keepalived_running", lambda: False)
    assert pair.status(tmp_path / "c.conf", tmp_path)["instances"]["ipv4"]["state"] == "STOPPED"


def test_notify_records_the_state_and_refuses_what_keepalived_never_sends(tmp_path):
    conf = tmp_path / "missing.conf"
    ok = portal_ha("notify", str(conf), str(tmp_path), "INSTANCE", "ipv4", "MASTER", "200")
    assert ok.returncode == 0, ok.stderr
    state = json.loads((tmp_path / "state-ipv4.json").read_text())
    assert (state["state"], state["priority"]) == ("MASTER", "200")
    assert "conntrackd is not running" in (tmp_path / "notify.log").read_text()
    bad = portal_ha("notify", str(conf), str(tmp_path), "INSTANCE", "ipv4; reboot", "MASTER")
    assert bad.returncode == 2
    assert "unexpected" in bad.stderr
    unsafe = portal_ha("notify", "/etc/x y", str(tmp_path), "INSTANCE", "ipv4", "MASTER")
    assert unsafe.returncode == 2
    assert "safe absolute path" in unsafe.stderr


def test_check_conntrackd_refuses_a_stats_only_config(tmp_path):
    stats_only = tmp_path / "conntrackd.conf"
    stats_only.write_text("General {\n\tLockFile /tmp/x.lock\n}\nStats {\n}\n")
    result = portal_ha("check-conntrackd", str(stats_only))
    assert result.returncode == 1
    assert "Mode FTFW" in result.stderr


def test_status_reports_the_operators_priority_files(monkeypatch, tmp_path):
    """Issue 25: `lab.sh failover` writes -254 into the priority files keepalived tracks; the
    host reports them, so the portal can say an operator moved the role (not a link down)."""
    monkeypatch.setattr(pair, "keepalived_running", lambda: True)
    assert pair.status(tmp_path / "c.conf", tmp_path)["operator_priority"] == {}
    (tmp_path / "priority-ipv4").write_text("-254\n")
    (tmp_path / "priority-ipv6").write_text("0\n")
    assert pair.status(tmp_path / "c.conf", tmp_path)["operator_priority"] == {"ipv4": -254}
    (tmp_path / "priority-ipv6").write_text("garbage")
    assert pair.status(tmp_path / "c.conf", tmp_path)["operator_priority"] == {"ipv4": -254}


def test_status_says_when_the_notify_hook_is_mid_transition(monkeypatch, tmp_path):
    """The hook holds notify.lock while it drives conntrackd; the portal then holds its verdict
    on the two hosts' counts (apps/health/services.py pair_warnings)."""
    import fcntl

    monkeypatch.setattr(pair, "keepalived_running", lambda: True)
    assert pair.status(tmp_path / "c.conf", tmp_path)["transition_running"] is False
    with open(tmp_path / "notify.lock", "w") as lock:
        assert pair.status(tmp_path / "c.conf", tmp_path)["transition_running"] is False
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert pair.status(tmp_path / "c.conf", tmp_path)["transition_running"] is True
    assert pair.status(tmp_path / "c.conf", tmp_path)["transition_running"] is False


def test_the_second_resync_waits_until_the_kernel_has_redelivered_every_destroy_event(
    monkeypatch, tmp_path
):
    """After a commit the kernel re-sends the destroy events conntrackd had no room for (its
    list `conntrack -L dying`); the quiet of conntrackd's counter alone is no proof: here it
    stands still while three connections still wait, for longer than the quiet needed."""
    from portal_fw import ha

    waiting = iter([3, 3, 3, 3, 3, 3, 3, 3, 1, 0])
    seen = []

    def fake_run(argv, timeout=60):
        assert argv[:3] == ["conntrack", "-L", "dying"]
        if argv[-1] == "ipv6":
            return subprocess.CompletedProcess(argv, 0, "", "")
        n = next(waiting, 0)
        seen.append(n)
        lines = "".join(f"tcp 6 ESTABLISHED src=10.0.0.{i}\n" for i in range(n))
        return subprocess.CompletedProcess(argv, 0, lines, "")

    monkeypatch.setattr(ha, "run", fake_run)
    monkeypatch.setattr(ha, "events_received", lambda conf: 40)
    monkeypatch.setattr(ha, "SETTLE_QUIET", 0.3)
    waited, events, most = ha.events_settle(tmp_path / "c.conf")
    assert most == 3
    assert seen[:10] == [3, 3, 3, 3, 3, 3, 3, 3, 1, 0]  # it did not stop while any waited
    assert waited >= 0.3 + 0.1 * 9
    assert events == 0

    # A kernel or tool that cannot list them: only the counter's quiet (1.2 s) counts.
    monkeypatch.setattr(
        ha, "run", lambda argv, timeout=60: subprocess.CompletedProcess(argv, 1, "", "no")
    )
    waited, _events, most = ha.events_settle(tmp_path / "c.conf")
    assert most is None
    assert 1.2 <= waited < 3
