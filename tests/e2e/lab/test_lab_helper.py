"""The firewall hosts of the lab: pinned sshd, forced command, and the helper's verbs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lab_support import (
    HOSTS,
    LAB_VAR,
    fw,
    in_ns,
    portal_tables_text,
    reset_host,
    ruleset,
    run,
    ssh_argv,
    wait_for,
)

pytestmark = pytest.mark.lab


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_sshd_answers_with_the_pinned_host_key(lab, host):
    answer = fw(host, "version")
    assert answer.rc == 0, answer.stderr
    assert answer.data["ok"] is True
    assert answer.data["host"] == host


def test_an_unpinned_host_key_is_refused(lab, tmp_path: Path):
    wrong = tmp_path / "known_hosts"
    # pl-nat2's key pinned for pl-nat1's address: the client must refuse to talk.
    nat2_key = (LAB_VAR / "pl-nat2" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    wrong.write_text(f"{HOSTS['pl-nat1']} {' '.join(nat2_key)}\n")
    result = run(*ssh_argv("pl-nat1", known_hosts=wrong), "version", timeout=30)
    assert result.returncode == 255
    assert "host key" in result.stderr.lower()


@pytest.mark.parametrize(
    "command",
    [
        "id",
        "sh -c id",
        "check; id",
        "check && id",
        "version $(id)",
        "/bin/sh",
        "apply --confirm-within 5; touch /tmp/pl-lab-pwned",
        "sh -c 'touch /tmp/pl-lab-pwned'",
        "apply --confirm-within 99999",
        "apply",
        "health --sample-ms 100000",
        "apply --confirm-within 5 --health-sample-ms 100000",
        "confirm now",
        "nft flush ruleset",
    ],
)
def test_any_other_command_is_refused(lab, command):
    answer = fw("pl-nat1", command)
    assert answer.rc == 2, (command, answer.stdout, answer.stderr)
    assert answer.data == {**answer.data, "ok": False, "error": "refused"}
    assert "portal-fw:" in answer.stderr
    assert not Path("/tmp/pl-lab-pwned").exists()


def test_a_login_shell_and_subsystems_are_refused(lab):
    login = run(*ssh_argv("pl-nat1"), input="", timeout=30)
    assert login.returncode == 2
    assert "no command given" in login.stderr
    sftp = run(*ssh_argv("pl-nat1")[:-1], "-s", ssh_argv("pl-nat1")[-1], "sftp", timeout=30)
    # No Subsystem is configured: sshd itself refuses (a host with one runs the helper: exit 2).
    assert sftp.returncode in (2, 255)
    assert "subsystem request failed" in sftp.stderr or "not allowed" in sftp.stderr


def test_rule_sets_may_only_touch_portal_tables(nat1):
    before = portal_tables_text(nat1)
    for text in (
        "flush ruleset\n",
        "table ip filter {\n}\n",
        "delete table inet portal_filter\ntable inet mine {\n}\n",
        'include "/etc/nftables.conf"\n',
        'table inet portal_x {\n\tinclude "/etc/shadow"\n}\n',
        "delete table inet handle 1\n",
    ):
        answer = fw(nat1, "apply --confirm-within 5", text)
        assert answer.rc == 2, text
        assert answer.data["error"] == "refused"
    assert portal_tables_text(nat1) == before


def test_check_rejects_a_broken_rule_set_and_changes_nothing(nat1):
    before = portal_tables_text(nat1)
    broken = ruleset("broken", allow=("ip daddr 10.100.1.23 acept",))
    answer = fw(nat1, "check", broken)
    assert answer.rc == 1
    assert answer.data["error"] == "failed"
    assert "Error:" in answer.data["detail"]  # nft's own message, with file:line
    assert "acept" in answer.data["detail"]
    assert portal_tables_text(nat1) == before
    assert fw(nat1, "version").data["version"] == "base-1"

    good = fw(nat1, "check", ruleset("good-2"))
    assert good.rc == 0
    assert portal_tables_text(nat1) == before


def test_apply_then_confirm_keeps_the_rule_set(nat1):
    answer = fw(nat1, "apply --confirm-within 2 --version label-2", ruleset("v-2"))
    assert answer.rc == 0, answer.stderr
    assert answer.data["version"] == "v-2"
    assert answer.data["loaded"]["source"].startswith("nft:inet portal_meta")
    confirmed = fw(nat1, "confirm")
    assert confirmed.rc == 0
    assert confirmed.data["confirmed"] is True
    time.sleep(3)
    version = fw(nat1, "version").data
    assert version["version"] == "v-2"
    assert version["pending_confirm"] is None
    assert version["state"]["confirmed"] is True


def test_apply_without_confirm_reverts_by_itself(nat1):
    before = portal_tables_text(nat1)
    answer = fw(nat1, "apply --confirm-within 2", ruleset("never-confirmed"))
    assert answer.rc == 0
    pending = fw(nat1, "version").data
    assert pending["version"] == "never-confirmed"
    assert pending["pending_confirm"]["seconds_left"] <= 2
    assert wait_for(lambda: portal_tables_text(nat1) == before, timeout=6)
    after = fw(nat1, "version").data
    assert after["version"] == "base-1"
    assert after["state"]["last_event"]["event"] == "rolled-back"
    late = fw(nat1, "confirm")  # the portal comes back too late: it is told so
    assert late.rc == 3
    assert "rolled-back" in late.data["message"]


def test_rollback_restores_the_previous_rule_set(nat1):
    before = portal_tables_text(nat1)
    assert fw(nat1, "apply --confirm-within 30", ruleset("v-3")).rc == 0
    assert fw(nat1, "confirm").rc == 0
    assert portal_tables_text(nat1) != before
    answer = fw(nat1, "rollback")
    assert answer.rc == 0
    assert answer.data["version"] == "base-1"
    assert portal_tables_text(nat1) == before
    again = fw(nat1, "rollback")
    assert again.rc == 3
    assert again.data["error"] == "conflict"


def test_rollback_while_pending_and_apply_on_top_of_a_pending_one(nat1):
    before = portal_tables_text(nat1)
    assert fw(nat1, "apply --confirm-within 30", ruleset("p-1")).rc == 0
    # A second apply before the confirm keeps the last confirmed state as rollback point.
    assert fw(nat1, "apply --confirm-within 30", ruleset("p-2")).rc == 0
    answer = fw(nat1, "rollback")
    assert answer.rc == 0
    assert answer.data["was_pending"] is True
    assert portal_tables_text(nat1) == before
    assert fw(nat1, "confirm").rc == 3


def test_apply_checks_first_and_a_refused_rule_set_arms_nothing(nat1):
    before = portal_tables_text(nat1)
    broken = ruleset("broken", allow=("ip daddr 10.100.1.23 acept",))
    answer = fw(nat1, "apply --confirm-within 30 --health-sample-ms 0", broken)
    assert answer.rc == 1
    assert answer.data["error"] == "failed"
    assert answer.data["phase"] == "check"  # nft -c refused it: nothing saved, nothing armed
    assert "acept" in answer.data["detail"]
    assert portal_tables_text(nat1) == before
    version = fw(nat1, "version").data
    assert version["version"] == "base-1"
    assert version["pending_confirm"] is None
    assert fw(nat1, "confirm").rc == 3


def test_apply_answers_with_the_health_read_back_after_the_load(nat1):
    answer = fw(nat1, "apply --confirm-within 30 --health-sample-ms 0", ruleset("h-5"))
    assert answer.rc == 0, answer.stderr
    assert answer.data["check_seconds"] >= 0
    health = answer.data["health"]
    assert health["version"] == "h-5"
    assert health["loaded"]["version"] == "h-5"
    assert health["conntrack"]["max"] > 0
    assert health["pending_confirm"]["seconds_left"] > 0  # armed before the load
    assert health["softirq"] == {"sample_ms": 0, "per_cpu": [], "max_share": 0.0}
    assert fw(nat1, "confirm").rc == 0
    assert "health" not in fw(nat1, "apply --confirm-within 30", ruleset("h-6")).data
    assert fw(nat1, "confirm").rc == 0


def test_staged_apply_does_not_need_a_second_upload(nat1):
    text = ruleset("staged-4")
    checked = fw(nat1, "check", text)
    assert checked.rc == 0
    answer = fw(nat1, f"apply --confirm-within 30 --staged {checked.data['sha256']}")
    assert answer.rc == 0, answer.stderr
    assert answer.data["version"] == "staged-4"
    assert fw(nat1, "confirm").rc == 0
    wrong = fw(nat1, "apply --confirm-within 30 --staged " + "0" * 64)
    assert wrong.rc == 3


def test_version_reports_what_was_applied(nat1):
    answer = fw(nat1, "apply --confirm-within 30 --version 17", ruleset("sha-abc123"))
    assert answer.rc == 0
    assert fw(nat1, "confirm").rc == 0
    version = fw(nat1, "version").data
    assert version["version"] == "sha-abc123"  # the marker in the kernel wins
    assert version["loaded"] == {"version": "sha-abc123", "source": "nft:inet portal_meta comment"}
    assert version["state"]["version"] == "17"
    assert version["state"]["sha256"] == answer.data["sha256"]
    assert version["drift"] is True  # the portal said 17, the kernel says otherwise
    # No marker at all: the helper's state file is what it knows.
    unmarked = "table inet portal_filter {\n\tchain forward {\n\t\ttype filter hook forward priority 0;\n\t}\n}\n"
    assert fw(nat1, "apply --confirm-within 30 --version 18", unmarked).rc == 0
    version = fw(nat1, "version").data
    assert version["version"] == "18"
    assert version["source"] == "state"
    assert fw(nat1, "rollback").rc == 0


def test_health_is_json_with_the_fields(lab):
    answer = fw("pl-nat1", "health")
    assert answer.rc == 0, answer.stderr
    data = answer.data
    assert data["conntrack"]["max"] > 0
    assert data["conntrack"]["count"] >= 0
    assert 0 <= data["conntrack"]["ratio"] <= 1
    assert data["softirq"]["sample_ms"] == 200
    assert data["softirq"]["per_cpu"]
    for cpu in data["softirq"]["per_cpu"]:
        assert 0 <= cpu["softirq"] <= 1
        assert 0 <= cpu["busy"] <= 1
    assert len(data["loadavg"]) == 3
    assert {"mgmt0", "dorm0", "inet0"} <= set(data["interfaces"])
    assert data["interfaces"]["mgmt0"]["rx_packets"] > 0
    assert "version" in data
    assert 0.15 < data["collect_seconds"] < 5


def test_tc_batch_is_applied_and_limited_to_qdisc_class_filter(lab):
    reset_host("pl-nat1")  # no shaping left over from other tests
    batch = (
        "qdisc replace dev dorm0 root handle 1: htb default 10\n"
        "class replace dev dorm0 parent 1: classid 1:10 htb rate 100mbit\n"
    )
    answer = fw("pl-nat1", "tc-apply", batch)
    assert answer.rc == 0, answer.stderr
    assert "htb 1:" in in_ns("pl-nat1", "tc", "qdisc", "show", "dev", "dorm0").stdout
    refused = fw("pl-nat1", "tc-apply", "filter add dev dorm0 parent 1: bpf obj /tmp/x.o\n")
    assert refused.rc == 2
    failed = fw("pl-nat1", "tc-apply", "qdisc add dev nosuchdev root handle 1: htb\n")
    assert failed.rc == 1
    assert fw("pl-nat1", "tc-apply", "qdisc del dev dorm0 root\n").rc == 0
