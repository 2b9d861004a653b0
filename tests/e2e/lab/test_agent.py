"""One agent per SSH connection, in the lab: JSON-line requests over a real sshd and forced
command; a bad request changes nothing; a protocol mismatch is refused with the message the
Firewalls page shows; an agent or connection that dies between apply and confirm leaves the
host to its confirm timer, and both hosts end on their last confirmed version."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from lab_support import LAB_VAR, REPO, fw, in_ns, lab_sh, portal_tables_text, ssh_argv, wait_for

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost
from apps.firewall.order import ruleset_rollout
from apps.firewall.push import Push
from apps.firewall.transport import AGENT_PROTOCOL
from tests.e2e.lab.push_support import version

pytestmark = [pytest.mark.lab, pytest.mark.django_db]


def agent_over_ssh(host: str, protocol: int = AGENT_PROTOCOL) -> subprocess.Popen:
    return subprocess.Popen(
        [*ssh_argv(host), f"agent --protocol {protocol}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ask(agent: subprocess.Popen, line: str) -> dict:
    agent.stdin.write(line + "\n")
    agent.stdin.flush()
    return json.loads(agent.stdout.readline())


def test_one_agent_answers_many_requests_and_refuses_bad_ones(nat1):
    before = portal_tables_text(nat1)
    agent = agent_over_ssh(nat1)
    try:
        hello = json.loads(agent.stdout.readline())
        assert (hello["agent"], hello["ok"], hello["host"]) == (AGENT_PROTOCOL, True, nat1)
        first = ask(agent, '{"id": 1, "verb": "version"}')
        assert (first["id"], first["ok"]) == (1, True)
        for line, message in [
            ("rm -rf /", "not JSON"),
            ('{"id": 2, "verb": "sh", "args": {"c": "id"}}', "unknown verb"),
            ('{"id": 3, "verb": "apply-bundle", "args": {"confirm_within": 99999}}', "1..3600"),
            (
                '{"id": 4, "verb": "apply-bundle", "args": {"confirm_within": 5}, '
                '"input": {"format": 1, "version": "' + "a" * 64 + '", "artefacts": '
                '{"nft": {"mode": "replace", "text": "flush ruleset"}}}}',
                "not allowed",
            ),
        ]:
            answer = ask(agent, line)
            assert (answer["ok"], answer["error"]) == (False, "refused"), answer
            assert message in answer["message"]
        last = ask(agent, '{"id": 5, "verb": "version"}')
        assert (last["ok"], last["version"]) == (True, first["version"])
    finally:
        agent.stdin.close()
        assert agent.wait(timeout=10) == 0
    assert portal_tables_text(nat1) == before
    assert fw(nat1, "version").data["pending_confirm"] is None


def test_an_agent_of_another_protocol_is_refused_with_what_to_update(lab):
    agent = agent_over_ssh("pl-nat1", protocol=AGENT_PROTOCOL + 1)
    out, _err = agent.communicate('{"id": 1, "verb": "confirm"}\n', timeout=20)
    assert agent.returncode == 5
    (hello,) = (json.loads(line) for line in out.splitlines())
    assert hello["message"] == (
        f"host runs agent {AGENT_PROTOCOL}, portal expects {AGENT_PROTOCOL + 1}: update the host"
    )


def test_a_portal_expecting_another_agent_applies_nothing_and_says_so(hosts, monkeypatch):
    from apps.firewall import transport

    monkeypatch.setattr(transport, "AGENT_COMMAND", f"agent --protocol {AGENT_PROTOCOL + 1}")
    monkeypatch.setattr(transport, "AGENT_PROTOCOL", AGENT_PROTOCOL + 1)
    transport.POOL.close()
    outcomes = ruleset_rollout(versions=[version(h) for h in hosts])
    expected = (
        f"host runs agent {AGENT_PROTOCOL}, portal expects {AGENT_PROTOCOL + 1}: update the host"
    )
    # Not "unreachable": the rollout of the site stops at the first host, as for any refusal.
    assert [(o.host, o.ok, o.step) for o in outcomes] == [("pl-nat1", False, "connect")]
    host = FirewallHost.objects.get(name="pl-nat1")
    assert host.push_status == PushStatus.ERROR  # reachable: not "unreachable"
    assert expected in host.error_reason
    assert fw("pl-nat1", "version").data["version"] is None  # nothing applied
    assert fw("pl-nat2", "version").data["version"] is None


def _dies_after_apply(monkeypatch, kill) -> None:
    """After the first host's apply-bundle answered, `kill(push, session)` runs once."""
    apply = Push.apply
    done: list[bool] = []

    def apply_then_kill(self, session, increment, during=None):
        reply = apply(self, session, increment, during)
        if not done and reply.ok:
            done.append(True)
            kill(self, session)
        return reply

    monkeypatch.setattr(Push, "apply", apply_then_kill)


def _both_back_on(good, timeout: float) -> bool:
    def back() -> bool:
        states = [fw(h, "version").data for h in ("pl-nat1", "pl-nat2")]
        return all(
            s["version"] == v.content_hash and s["pending_confirm"] is None
            for s, v in zip(states, good, strict=True)
        )

    return wait_for(back, timeout=timeout)


def test_an_agent_killed_between_apply_and_confirm_leaves_the_host_to_its_timer(
    hosts, settings, monkeypatch
):
    good = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=good))
    settings.PORTAL_FIREWALL_CONFIRM_WITHIN = 3

    def kill_agent(push, session):
        os.kill(session._agent.hello["pid"], signal.SIGKILL)  # the agent on the host

    _dies_after_apply(monkeypatch, kill_agent)
    newer = [version(h, port=9090) for h in FirewallHost.objects.order_by("rollout_order")]
    outcomes = ruleset_rollout(versions=newer)
    assert [(o.host, o.ok) for o in outcomes] == [("pl-nat1", False)]
    assert "reverts by itself" in outcomes[0].message
    assert _both_back_on(good, timeout=3 + 5)


def test_a_connection_killed_between_apply_and_confirm_leaves_the_host_to_its_timer(
    hosts, settings, monkeypatch
):
    good = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=good))
    settings.PORTAL_FIREWALL_CONFIRM_WITHIN = 3

    def kill_connection(push, session):
        assert lab_sh("sshd-stop", "nat1").returncode == 0  # sshd and its sessions die

    _dies_after_apply(monkeypatch, kill_connection)
    newer = [version(h, port=9090) for h in FirewallHost.objects.order_by("rollout_order")]
    try:
        outcomes = ruleset_rollout(versions=newer)
    finally:
        assert lab_sh("sshd-start", "nat1").returncode == 0
    assert [(o.host, o.ok) for o in outcomes] == [("pl-nat1", False)]
    assert "reverts by itself" in outcomes[0].message
    assert _both_back_on(good, timeout=3 + 5)


def test_pooled_pushes_keep_one_agent_per_connection(hosts):
    from apps.firewall.transport import POOL

    POOL.close()
    first = [version(h, port=8081) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=first))
    started = POOL.agents_started
    pids = {key: agent.hello["pid"] for key, agent in POOL.agents.items()}
    second = [version(h, port=8082) for h in FirewallHost.objects.order_by("rollout_order")]
    assert all(o.ok for o in ruleset_rollout(versions=second))
    assert POOL.agents_started == started  # no new agent: the same processes answered
    assert {key: agent.hello["pid"] for key, agent in POOL.agents.items()} == pids


def test_after_a_host_upgrade_the_next_push_runs_the_installed_agent(hosts):
    """The portal keeps connections and their agents between rollouts; a host upgraded meanwhile
    (deploy/firewall/install.sh over the same directory, as the lab installs it) must not go on
    with the agent that loaded the old files. At the portal's probe the old agent exits
    unanswered, the push goes through on a new connection with the installed agent."""
    from apps.firewall.transport import POOL

    POOL.close()
    first = [version(h, port=8083) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=first))
    old_pids = {agent.hello["pid"] for agent in POOL.agents.values()}
    assert len(old_pids) == 2
    upgrade = subprocess.run(
        ["bash", str(REPO / "deploy" / "firewall" / "install.sh"), "--lib", "/run/portal-lab/lib",
         "--sbin", "/run/portal-lab", "--state", "", "--python", "/usr/bin/python3"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stderr
    second = [version(h, port=8084) for h in FirewallHost.objects.order_by("rollout_order")]
    outcomes = ruleset_rollout(versions=second)
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    new_pids = {agent.hello["pid"] for agent in POOL.agents.values()}
    assert len(new_pids) == 2
    assert not new_pids & old_pids
    assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in old_pids), 5)
    for name in ("pl-nat1", "pl-nat2"):
        assert '"event": "agent-replaced"' in (LAB_VAR / name / "fw" / "log.jsonl").read_text()


def test_a_refused_increment_is_reported_and_the_portal_sends_the_full_bundle(hosts, request):
    from apps.firewall.compiled import increment_for
    from apps.firewall.memo import PUSH_MEMO
    from tests.e2e.lab.push_support import compiled_for

    # The worker's memory of what it compiled (it sends an increment only from there).
    for host in hosts:
        for port in (8080, 9090):
            compiled = compiled_for(host.name, port)
            PUSH_MEMO.compiled_remember(host.pk, compiled.content_hash, compiled, None)
    request.addfinalizer(PUSH_MEMO.clear)
    good = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=good))
    nat1 = FirewallHost.objects.get(name="pl-nat1")
    newer = {h.name: version(h, port=9090) for h in FirewallHost.objects.all()}
    increment = increment_for(host=nat1, version=newer["pl-nat1"])
    assert increment is not None
    # A hand change on pl-nat1 takes away the element the increment deletes: the kernel
    # refuses the increment's batch as a whole.
    gone = next(line for line in increment.nft.splitlines() if line.startswith("delete element"))
    family, table, name, element = gone.split(" ", 5)[2:]
    assert (
        in_ns("pl-nat1", "nft", "delete", "element", family, table, name, element).returncode == 0
    )
    log = LAB_VAR / "pl-nat1" / "fw" / "log.jsonl"
    seen = log.stat().st_size
    outcomes = ruleset_rollout(versions=list(newer.values()))
    assert all(o.ok for o in outcomes), outcomes
    events = [json.loads(line) for line in log.read_text()[seen:].splitlines()]
    refused = next(e for e in events if e["event"] == "increment-refused")
    assert "No such file or directory" in refused["detail"]
    applied = [e for e in events if e["event"] == "bundle-applied"]
    assert [e["modes"]["nft"] for e in applied] == ["replace"]  # the full bundle, once
    assert " . 9090 " in portal_tables_text("pl-nat1")  # the new forward, by the full bundle
    for host in ("pl-nat1", "pl-nat2"):
        state = fw(host, "version").data
        assert state["version"] == newer[host].content_hash
        assert state["pending_confirm"] is None
