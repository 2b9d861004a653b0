"""The firewall hosts of the lab: pinned sshd, forced command, and the helper's verbs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from lab_support import (
    HOSTS,
    LAB_VAR,
    apply,
    bundle_of,
    fw,
    in_ns,
    label,
    portal_tables_text,
    push,
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
        "apply-bundle --confirm-within 5; touch /tmp/pl-lab-pwned",
        "sh -c 'touch /tmp/pl-lab-pwned'",
        "apply-bundle --confirm-within 99999",
        "apply-bundle",
        "apply --confirm-within 5",
        "health --sample-ms 100000",
        "apply-bundle --confirm-within 5 --health-sample-ms 100000",
        "confirm now",
        "nft flush ruleset",
        "agent",
        "agent --protocol 1; id",
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
        answer = apply(nat1, text, "scope", confirm_within=5)
        assert answer.rc == 2, text
        assert (answer.data["error"], answer.data["phase"]) == ("refused", "check")
    assert portal_tables_text(nat1) == before


def test_a_broken_rule_set_is_refused_at_the_check_and_nothing_is_armed(nat1):
    before = portal_tables_text(nat1)
    broken = ruleset("broken", allow=("ip daddr 10.100.1.23 acept",))
    answer = apply(nat1, broken, "broken", extra="--health-sample-ms 0")
    assert answer.rc == 1
    assert (answer.data["error"], answer.data["phase"]) == ("failed", "check")
    assert "Error:" in answer.data["detail"]  # nft's own message, with file:line
    assert "acept" in answer.data["detail"]
    assert portal_tables_text(nat1) == before
    version = fw(nat1, "version").data
    assert version["version"] == label("base-1")
    assert version["pending_confirm"] is None
    assert fw(nat1, "confirm").rc == 3


def test_apply_then_confirm_keeps_the_rule_set(nat1):
    answer = apply(nat1, ruleset("v-2"), "v-2", confirm_within=2)
    assert answer.rc == 0, answer.stderr
    assert answer.data["version"] == label("v-2")
    confirmed = fw(nat1, "confirm")
    assert confirmed.rc == 0
    assert confirmed.data["confirmed"] is True
    time.sleep(3)
    version = fw(nat1, "version").data
    assert version["version"] == label("v-2")
    assert version["pending_confirm"] is None
    assert version["state"]["confirmed"] is True
    assert 'portal-version=v-2"' in portal_tables_text(nat1)


def test_apply_without_confirm_reverts_by_itself(nat1):
    before = portal_tables_text(nat1)
    answer = apply(nat1, ruleset("never-confirmed"), "never-confirmed", confirm_within=2)
    assert answer.rc == 0
    pending = fw(nat1, "version").data
    assert pending["version"] == label("never-confirmed")
    assert pending["pending_confirm"]["seconds_left"] <= 2
    assert wait_for(lambda: portal_tables_text(nat1) == before, timeout=6)
    assert wait_for(lambda: fw(nat1, "version").data["pending_confirm"] is None, timeout=3)
    after = fw(nat1, "version").data
    assert after["version"] == label("base-1")
    assert after["state"]["last_event"]["event"] == "rolled-back"
    late = fw(nat1, "confirm")  # the portal comes back too late: it is told so
    assert late.rc == 3
    assert "rolled-back" in late.data["message"]


def test_rollback_restores_the_previous_rule_set(nat1):
    before = portal_tables_text(nat1)
    push(nat1, ruleset("v-3"), "v-3")
    assert portal_tables_text(nat1) != before
    answer = fw(nat1, "rollback")
    assert answer.rc == 0
    assert answer.data["version"] == label("base-1")
    assert portal_tables_text(nat1) == before
    again = fw(nat1, "rollback")
    assert again.rc == 3
    assert again.data["error"] == "conflict"


def test_rollback_while_pending_and_apply_on_top_of_a_pending_one(nat1):
    before = portal_tables_text(nat1)
    assert apply(nat1, ruleset("p-1"), "p-1").rc == 0
    # A second apply before the confirm keeps the last confirmed state as rollback point.
    assert apply(nat1, ruleset("p-2"), "p-2").rc == 0
    answer = fw(nat1, "rollback")
    assert answer.rc == 0
    assert answer.data["was_pending"] is True
    assert portal_tables_text(nat1) == before
    assert fw(nat1, "confirm").rc == 3


def test_apply_answers_with_the_health_read_back_after_the_load(nat1):
    answer = apply(nat1, ruleset("h-5"), "h-5", extra="--health-sample-ms 0")
    assert answer.rc == 0, answer.stderr
    assert answer.data["check_seconds"] >= 0
    health = answer.data["health"]
    assert health["version"] == label("h-5")
    assert health["conntrack"]["max"] > 0
    assert health["pending_confirm"]["seconds_left"] > 0  # armed before the load
    assert health["softirq"] == {"sample_ms": 0, "per_cpu": [], "max_share": 0.0}
    assert fw(nat1, "confirm").rc == 0
    assert "health" not in apply(nat1, ruleset("h-6"), "h-6").data
    assert fw(nat1, "confirm").rc == 0


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


def test_tc_lines_are_limited_to_qdisc_class_filter(lab):
    reset_host("pl-nat1")  # no shaping left over from other tests
    batch = (
        "qdisc replace dev dorm0 root handle 1: htb default 10\n"
        "class replace dev dorm0 parent 1: classid 1:10 htb rate 100mbit\n"
    )

    def with_tc(text: str, name: str):
        payload = json.loads(bundle_of("", name, mode="increment"))
        payload["artefacts"] = {"tc": {"mode": "replace", "text": text}}
        return fw("pl-nat1", "apply-bundle --confirm-within 30", json.dumps(payload))

    answer = with_tc(batch, "tc-1")
    assert answer.rc == 0, answer.stderr
    assert "htb 1:" in in_ns("pl-nat1", "tc", "qdisc", "show", "dev", "dorm0").stdout
    assert fw("pl-nat1", "confirm").rc == 0
    refused = with_tc("filter add dev dorm0 parent 1: bpf obj /tmp/x.o\n", "tc-2")
    assert (refused.rc, refused.data["phase"]) == (2, "check")
    failed = with_tc("qdisc add dev nosuchdev root handle 1: htb\n", "tc-3")
    assert (failed.rc, failed.data["phase"]) == (1, "check")
    assert "nosuchdev" in failed.data["message"]
    reset_host("pl-nat1")
