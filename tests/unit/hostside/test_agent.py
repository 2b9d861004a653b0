"""portal_fw.agent and portal_fw.verbs: the protocol. Every malformed request gets a clear
refusal, the agent goes on serving, a protocol mismatch is refused in the hello."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from portal_fw import AGENT_PROTOCOL
from portal_fw.agent import Agent, parse_command
from portal_fw.common import HelperError
from portal_fw.host import Host
from portal_fw.verbs import VERBS, args_from_words, validate

LAUNCHER = Path(__file__).resolve().parents[3] / "deploy" / "firewall" / "portal-fw"


@pytest.fixture
def agent(tmp_path) -> Agent:
    return Agent(Host(tmp_path, "t1"), max_input=4096)


def serve(agent: Agent, *lines: bytes, expected: int = AGENT_PROTOCOL) -> tuple[int, list[dict]]:
    out = io.BytesIO()
    code = agent.serve(io.BytesIO(b"".join(lines)), out, expected)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_agent_says_hello_and_answers_each_request_by_its_id(agent):
    code, answers = serve(
        agent,
        b'{"id": 1, "verb": "version"}\n',
        b"\n",
        b'{"id": "b", "verb": "confirm"}\n',
    )
    assert code == 0
    hello, first, second = answers
    assert (hello["agent"], hello["ok"], hello["host"]) == (AGENT_PROTOCOL, True, "t1")
    assert "apply-bundle" in hello["verbs"]
    assert (first["id"], first["ok"], first["version"]) == (1, True, None)
    assert first["agent_seconds"] >= 0
    assert (second["id"], second["ok"], second["error"], second["code"]) == (
        "b", False, "conflict", 3,
    )  # fmt: skip
    assert second["message"] == "nothing to confirm"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json\n", "not JSON"),
        (b"[1, 2]\n", "one JSON object"),
        (b'{"verb": "version"}\n', "needs an id"),
        (b'{"id": true, "verb": "version"}\n', "needs an id"),
        (b'{"id": 1, "verb": "sh", "args": {}}\n', "unknown verb 'sh'"),
        (b'{"id": 1, "verb": "version", "shell": "id"}\n', "unknown request key(s) shell"),
        (b'{"id": 1, "verb": "health", "args": {"sample_ms": 99999}}\n', "0..2000"),
        (b'{"id": 1, "verb": "health", "args": {"sample_ms": "5"}}\n', "integer"),
        (b'{"id": 1, "verb": "health", "args": {"no_digest": 1}}\n', "true or false"),
        (b'{"id": 1, "verb": "health", "args": {"cmd": "id"}}\n', "unknown argument(s) cmd"),
        (b'{"id": 1, "verb": "apply-bundle", "args": {}}\n', "confirm_within is required"),
        (
            b'{"id": 1, "verb": "apply-bundle", "args": {"confirm_within": 5}}\n',
            "carries no input",
        ),
        (b'{"id": 1, "verb": "confirm", "input": "x"}\n', "takes no input"),
    ],
)
def test_a_bad_request_is_refused_and_the_agent_goes_on(agent, tmp_path, line, message):
    code, answers = serve(agent, line, b'{"id": 9, "verb": "version"}\n')
    assert code == 0
    refused, after = answers[1], answers[2]
    assert (refused["ok"], refused["error"], refused["code"]) == (False, "refused", 2)
    assert message in refused["message"]
    assert (after["id"], after["ok"]) == (9, True)
    assert not (tmp_path / "pending.json").exists()
    logged = (tmp_path / "log.jsonl").read_text()
    assert '"event": "refused"' in logged


def test_an_oversized_request_is_refused_whole(agent):
    big = b'{"id": 1, "verb": "version", "args": {"x": "' + b"a" * 10000 + b'"}}\n'
    _code, answers = serve(agent, big, b'{"id": 2, "verb": "version"}\n')
    assert "larger than 4096 bytes" in answers[1]["message"]
    assert (answers[2]["id"], answers[2]["ok"]) == (2, True)


def test_a_portal_expecting_another_protocol_is_refused_in_the_hello(agent, tmp_path):
    code, answers = serve(agent, b'{"id": 1, "verb": "confirm"}\n', expected=AGENT_PROTOCOL + 1)
    assert code == 5
    assert answers == [
        {
            "agent": AGENT_PROTOCOL,
            "ok": False,
            "error": "protocol",
            "host": "t1",
            "message": f"host runs agent {AGENT_PROTOCOL}, portal expects {AGENT_PROTOCOL + 1}: "
            "update the host",
        }
    ]  # nothing after the hello was read


@pytest.mark.parametrize(
    "command",
    ["", "id", "sh -c id", "version; id", "apply --confirm-within 5", "\x1b[A", "x" * 2000],
)
def test_only_agent_or_a_verb_may_be_asked_for(command):
    with pytest.raises(HelperError) as caught:
        parse_command(command)
    assert caught.value.kind == "refused"


def test_command_words_become_typed_arguments():
    assert args_from_words("health", ["--sample-ms", "0", "--no-digest"]) == {
        "sample_ms": 0,
        "no_digest": True,
    }
    with pytest.raises(HelperError, match="unexpected"):
        args_from_words("confirm", ["now"])
    with pytest.raises(HelperError, match="needs an integer"):
        args_from_words("apply-bundle", ["--confirm-within", "soon"])
    assert validate("apply-bundle", {"confirm_within": 30}) == {"confirm_within": 30}


def test_every_verb_is_documented_as_called_by_the_portal_or_an_operator_verb():
    portal = {
        "apply-bundle",
        "confirm",
        "rollback",
        "health",
        "traffic",
        "dhcp-leases",
        "ha-resync",
    }
    assert {name for name, verb in VERBS.items() if not verb.operator} == portal
    assert {name for name, verb in VERBS.items() if verb.operator} == {"version", "digest", "help"}


def test_the_launcher_runs_the_agent_without_site_packages(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "SSH_ORIGINAL_COMMAND": f"agent --protocol {AGENT_PROTOCOL}"}
    result = subprocess.run(
        [str(LAUNCHER), "--state-dir", str(tmp_path), "--host-name", "x"],
        input='{"id": 1, "verb": "help"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    hello, answer = (json.loads(line) for line in result.stdout.splitlines())
    assert hello["ok"] is True
    assert answer["verbs"]["apply-bundle"]["input"] is True
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys; print(any('site-packages' in p for p in sys.path))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "False"


def test_an_agent_whose_files_were_replaced_leaves_the_portals_probe_unanswered(agent, monkeypatch):
    """After a host upgrade a kept connection's agent would go on with the code it loaded: at
    the portal's `version` probe it exits unanswered instead (the portal then starts the
    installed one); any other request is still answered, so no session is cut half way."""
    from portal_fw import agent as agent_module

    code, answers = serve(agent, b'{"id": 1, "verb": "version"}\n')
    assert (code, [a.get("id") for a in answers]) == (0, [None, 1])  # unchanged: answered

    monkeypatch.setattr(agent_module, "installed_code", lambda: (("nft.py", 1, 2, 3),))
    code, answers = serve(
        agent,
        b'{"id": 2, "verb": "confirm"}\n',
        b'{"id": 3, "verb": "version"}\n',
        b'{"id": 4, "verb": "confirm"}\n',
    )
    assert code == 0
    assert [a.get("id") for a in answers] == [None, 2]  # the hello, the confirm; then it ended
    logged = agent.host.log_file.read_text()
    assert '"event": "agent-replaced"' in logged


def test_the_installed_code_changes_with_any_file_of_the_package(tmp_path):
    import os
    import shutil

    from portal_fw.agent import PACKAGE_DIR, installed_code

    copy = tmp_path / "portal_fw"
    shutil.copytree(PACKAGE_DIR, copy)
    before = installed_code(copy)
    assert before == installed_code(copy)
    assert len(before) >= 10
    stat = (copy / "tc.py").stat()
    os.utime(copy / "tc.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert installed_code(copy) != before
