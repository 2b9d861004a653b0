"""portal-fw's apply-bundle, its one rollback point and the content digest, on a real kernel.

Each test runs the helper locally (its local-command mode, no SSH) inside network namespaces it
creates itself (``pl-h1*``, veth pairs inside them, 10.x addresses only) and deletes afterwards.
Nothing touches the root namespace or the shared lab namespaces (pl-nat1, pl-nat2, ...).

    .venv/bin/pytest tests/e2e/lab/test_helper_bundle.py   (as root)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal_fw.digest import multiset_digest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
HELPER = REPO / "deploy" / "firewall" / "portal-fw"  # the entry point, run from the repository


def sh(*argv: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=60, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{argv}: {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


@dataclass
class Answer:
    rc: int
    data: dict
    stderr: str


@dataclass
class Host:
    ns: str
    peer_ns: str
    state: Path
    etc: Path
    artefacts: Path

    def ns_run(self, *argv: str, input: str | None = None, check: bool = True):
        return sh("ip", "netns", "exec", self.ns, *argv, input=input, check=check)

    def fw(self, *command: str, input: str = "", artefacts: Path | None = None) -> Answer:
        argv = ["/usr/bin/python3", "-I", "-S", str(HELPER), "--state-dir", str(self.state)]
        argv += ["--artefacts", str(artefacts or self.artefacts), *command]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}
        result = subprocess.run(
            ["ip", "netns", "exec", self.ns, *argv],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        lines = result.stdout.strip().splitlines()
        return Answer(result.returncode, json.loads(lines[-1]) if lines else {}, result.stderr)

    def bundle(self, confirm_within: int = 30, **artefacts) -> Answer:
        return self.fw(
            "apply-bundle", "--confirm-within", str(confirm_within), input=bundle(**artefacts)
        )

    def nft_text(self) -> str:
        return self.ns_run("nft", "-s", "list", "ruleset").stdout

    def tc_text(self, dev: str = "dorm0") -> str:
        qdisc = self.ns_run("tc", "-d", "qdisc", "show", "dev", dev).stdout
        classes = self.ns_run("tc", "-d", "class", "show", "dev", dev).stdout
        # The class listing follows the kernel's hash order: compare the lines as a set.
        return qdisc + "".join(sorted(classes.splitlines(keepends=True)))

    def snapshot(self) -> tuple[str, str, str]:
        return self.nft_text(), self.tc_text("dorm0"), self.tc_text("inet0")


def bundle(version: str | None = None, **artefacts) -> str:
    body = {name.replace("_", "-"): spec for name, spec in artefacts.items()}
    return json.dumps({"format": 1, "version": version or secrets.token_hex(32), "artefacts": body})


def nft_rules(*, elements: tuple[str, ...] = ("10.0.0.1 : 10.1.0.1", "10.0.0.2 : 10.1.0.2"),
              extra_rule: str = "") -> str:  # fmt: skip
    return (
        "table inet portal_fw {\n"
        "\tmap dev4 { type ipv4_addr : ipv4_addr; elements = { " + ", ".join(elements) + " } }\n"
        "\tset blocked { type ipv4_addr; elements = { 10.9.0.1, 10.9.0.2, 10.9.0.3 } }\n"
        "\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n"
        "\t\tip saddr @blocked drop\n"
        f"\t\t{extra_rule}\n"
        "\t}\n"
        "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n"
        "\t\tcounter\n\t}\n"
        "}\n"
    )


def tc_batch(*classes: tuple[str, str], dev: str = "dorm0") -> str:
    lines = [
        f"qdisc replace dev {dev} root pfifo limit 1000",
        f"qdisc replace dev {dev} root handle 1: htb default 2",
        f"class replace dev {dev} parent 1: classid 1:2 htb rate 1000mbit ceil 1000mbit "
        "burst 125000 cburst 125000 quantum 200000",
    ]
    lines += [
        f"class replace dev {dev} parent 1: classid {classid} htb rate {rate} ceil {rate} "
        "burst 1600 cburst 1600 quantum 1514"
        for classid, rate in classes
    ]
    return "\n".join(lines) + "\n"


def nft(mode: str, text: str) -> dict:
    return {"mode": mode, "text": text}


@pytest.fixture
def host(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.fail("these tests need root (network namespaces)")
    suffix = secrets.token_hex(3)
    ns, peer = f"pl-h1{suffix}", f"pl-h1{suffix}p"
    state = tmp_path / "state"
    etc = tmp_path / "etc"
    etc.mkdir()
    artefacts = tmp_path / "artefacts.json"
    artefacts.write_text(
        json.dumps(
            {
                "demo": {
                    "path": str(etc / "demo.json"),
                    "check": ["/usr/bin/python3", "-I", "-m", "json.tool", "{file}"],
                    # Records that it ran, and with which content.
                    "reload": ["/usr/bin/cp", "{file}", str(etc / "reloaded.json")],
                    "mode": "0640",
                }
            }
        )
    )
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "netns", "add", peer)
        for dev, address in (("dorm0", "10.99.0"), ("inet0", "10.98.0")):
            sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", dev + "p")
            sh("ip", "-n", ns, "link", "set", dev + "p", "netns", peer)
            sh("ip", "-n", ns, "addr", "add", f"{address}.1/24", "dev", dev)
            sh("ip", "-n", peer, "addr", "add", f"{address}.2/24", "dev", dev + "p")
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", peer, "link", "set", dev + "p", "up")
        yield Host(ns, peer, state, etc, artefacts)
    finally:
        with contextlib.suppress(OSError, ValueError, KeyError):
            pending = json.loads((state / "pending.json").read_text())
            cmdline = Path(f"/proc/{pending['timer_pid']}/cmdline").read_bytes()
            if pending["token"].encode() in cmdline:  # our own timer process, by its pid
                os.kill(int(pending["timer_pid"]), signal.SIGTERM)
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "del", peer, check=False)


@pytest.fixture
def baseline(host: Host) -> Host:
    """A confirmed bundle: nft, shaping on dorm0 and inet0, the demo file (version 1)."""
    answer = host.bundle(
        nft=nft("replace", nft_rules()),
        tc=nft("replace", tc_batch(("1:10", "10mbit")) + tc_batch(("1:30", "5mbit"), dev="inet0")),
        demo=nft("replace", '{"v": 1}\n'),
    )
    assert answer.rc == 0, answer
    assert host.fw("confirm").rc == 0
    return host


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


# ---- apply, fail half way, timer, rollback ------------------------------------------------


def test_a_tc_batch_failing_half_way_leaves_the_previous_state_exactly(baseline: Host):
    host = baseline
    before = host.snapshot()
    failing = (
        "class replace dev dorm0 parent 1: classid 1:10 htb rate 20mbit ceil 20mbit\n"
        "class replace dev dorm0 parent 1: classid 1:11 htb rate 1mbit ceil 1mbit\n"
        "class replace dev inet0 parent 1: classid 1:30 htb rate 7mbit ceil 7mbit\n"
        # The static check cannot know that parent 7: does not exist: tc fails here.
        "class add dev dorm0 parent 7: classid 7:3 htb rate 1mbit ceil 1mbit\n"
    )
    answer = host.bundle(
        nft=nft("increment", "add element inet portal_fw blocked { 10.9.0.9 }\n"),
        tc=nft("increment", failing),
    )
    assert answer.rc == 1, answer
    assert answer.data["phase"] == "apply"
    assert answer.data["artefact"] == "tc"
    assert answer.data["rolled_back"] is True
    assert answer.data["tc_verified"] is True
    assert "detail" in answer.data  # tc's own message
    assert host.snapshot() == before
    assert not (host.state / "pending.json").exists()
    # The confirmed bundle is still the recorded state... and its tc batch the current one.
    assert host.fw("digest").data["differs_from_applied"] == []


def test_the_timer_restores_nft_and_tc_together(baseline: Host):
    host = baseline
    before = host.snapshot()
    answer = host.bundle(
        confirm_within=2,
        nft=nft("replace", nft_rules(elements=("10.0.0.7 : 10.1.0.7",))),
        tc=nft("replace", tc_batch(("1:10", "30mbit"), ("1:12", "2mbit"))),  # inet0 dropped
    )
    assert answer.rc == 0, answer
    assert host.snapshot() != before
    assert "htb" not in host.tc_text("inet0")
    assert wait_for(lambda: not (host.state / "pending.json").exists(), 10)
    assert host.snapshot() == before
    log = [json.loads(line) for line in (host.state / "log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "rolled-back"
    assert log[-1]["tc_verified"] is True
    confirm = host.fw("confirm")
    assert confirm.rc == 3
    assert "not confirmed within 2s" in confirm.data["message"]


def test_the_confirm_window_counts_from_the_answer_not_from_the_arming(baseline: Host, tmp_path):
    """A bundle that takes longer to apply than its window (a large site's full push, a slow
    reload) is not rolled back before the portal could confirm it."""
    host = baseline
    slow = tmp_path / "slow.json"
    slow.write_text(
        json.dumps(
            {
                "demo": {
                    "path": str(host.etc / "demo.json"),
                    "check": ["/usr/bin/python3", "-I", "-m", "json.tool", "{file}"],
                    "reload": ["/usr/bin/sleep", "3"],  # longer than the 2 s window
                    "mode": "0640",
                }
            }
        )
    )
    started = time.monotonic()
    answer = host.fw(
        "apply-bundle", "--confirm-within", "2", artefacts=slow,
        input=bundle(demo=nft("replace", '{"v": 3}\n')),
    )  # fmt: skip
    assert answer.rc == 0, answer
    assert time.monotonic() - started > 3
    time.sleep(1)  # past the deadline as armed, inside the window counted from the answer
    assert host.fw("confirm", artefacts=slow).rc == 0
    assert (host.etc / "demo.json").read_text() == '{"v": 3}\n'
    log = (host.state / "log.jsonl").read_text()
    assert "rolled-back" not in log


def test_explicit_rollback_restores_nft_tc_and_a_file_artefact(baseline: Host):
    host = baseline
    before = host.snapshot()
    demo = host.etc / "demo.json"
    assert demo.read_text() == '{"v": 1}\n'
    assert oct(demo.stat().st_mode & 0o777) == "0o640"
    answer = host.bundle(
        nft=nft("increment", "delete element inet portal_fw dev4 { 10.0.0.1 }\n"),
        tc=nft("increment", "class replace dev dorm0 parent 1: classid 1:10 htb rate 3mbit\n"),
        demo=nft("replace", '{"v": 2}\n'),
    )
    assert answer.rc == 0, answer
    # The point replays the text that built the tables instead of reading them back.
    assert answer.data["rollback_point"]["nft_source"] == "nft.current"
    assert demo.read_text() == '{"v": 2}\n'
    assert (host.etc / "reloaded.json").read_text() == '{"v": 2}\n'  # the reload ran
    assert host.snapshot() != before
    rolled = host.fw("rollback")
    assert rolled.rc == 0, rolled
    assert rolled.data["tc_verified"] is True
    assert host.snapshot() == before
    assert demo.read_text() == '{"v": 1}\n'
    assert (host.etc / "reloaded.json").read_text() == '{"v": 1}\n'  # reloaded on restore
    assert host.fw("rollback").rc == 3  # the point is consumed


def test_rollback_removes_a_file_that_was_absent_and_the_shaping_that_was_not_there(host: Host):
    answer = host.bundle(
        tc=nft("replace", tc_batch(("1:10", "10mbit"))),
        demo=nft("replace", "[]\n"),
    )
    assert answer.rc == 0, answer
    assert "htb" in host.tc_text()
    assert host.fw("rollback").rc == 0
    assert not (host.etc / "demo.json").exists()
    assert "htb" not in host.tc_text()
    assert not (host.state / "tc.current").exists()


def test_a_failing_file_check_changes_nothing(baseline: Host):
    host = baseline
    before = host.snapshot()
    point = os.readlink(host.state / "rollback.d")
    answer = host.bundle(
        nft=nft("increment", "add element inet portal_fw blocked { 10.9.0.9 }\n"),
        tc=nft("increment", "class replace dev dorm0 parent 1: classid 1:10 htb rate 3mbit\n"),
        demo=nft("replace", "{not json\n"),
    )
    assert answer.rc == 1, answer
    assert answer.data["phase"] == "check"
    assert answer.data["artefact"] == "demo"
    assert host.snapshot() == before
    assert (host.etc / "demo.json").read_text() == '{"v": 1}\n'
    assert not (host.state / "pending.json").exists()
    assert os.readlink(host.state / "rollback.d") == point
    assert not list(host.etc.glob(".demo.json.*"))  # the checked temp file is gone


def test_a_tc_line_naming_a_missing_device_fails_the_check(baseline: Host):
    before = baseline.snapshot()
    answer = baseline.bundle(
        tc=nft("increment", "class replace dev nosuch0 parent 1: classid 1:10 htb rate 3mbit\n")
    )
    assert answer.rc == 1, answer
    assert answer.data["phase"] == "check"
    assert "nosuch0" in answer.data["message"]
    assert baseline.snapshot() == before


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (bundle(other=nft("replace", "x")), "not declared"),
        (bundle(nft=nft("sideways", "")), "mode"),
        (bundle(demo=nft("increment", "{}")), "mode"),
        (bundle(version="ABC", nft=nft("replace", "")), "version"),
        (json.dumps({"format": 1, "version": "a" * 64, "artefacts": {}, "x": 1}), "unknown"),
        (json.dumps({"format": 2, "version": "a" * 64, "artefacts": {}}), "format"),
        (bundle(nft={"mode": "replace", "text": "", "extra": 1}), "exactly"),
        (bundle(nft=nft("replace", "flush ruleset\n")), "not allowed"),
        ("[]", "one JSON object"),
    ],
)
def test_a_malformed_bundle_is_refused_and_nothing_changes(baseline: Host, payload, message):
    before = baseline.snapshot()
    answer = baseline.fw("apply-bundle", "--confirm-within", "5", input=payload)
    assert answer.rc == 2, answer
    assert answer.data["error"] == "refused"
    assert message in answer.data["message"]
    assert baseline.snapshot() == before
    assert not (baseline.state / "pending.json").exists()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"nft": {"path": "/tmp/x", "check": ["true", "{file}"]}}, "reserved"),
        ({"Bad": {"path": "/tmp/x", "check": ["true", "{file}"]}}, "must match"),
        ({"a": {"path": "tmp/x", "check": ["true", "{file}"]}}, "absolute"),
        ({"a": {"path": "/tmp/x", "check": "true {file}"}}, "argv"),
        ({"a": {"path": "/tmp/x", "check": ["true", "{path}"]}}, "only placeholder"),
        ({"a": {"path": "/tmp/x", "check": ["true"]}}, "must name the file"),
        ({"a": {"path": "/tmp/x", "check": ["true", "{file}"], "owner": "x"}}, "unknown"),
    ],
)
def test_a_malformed_artefact_configuration_stops_the_helper(host: Host, config, message):
    bad = host.etc / "bad.json"
    bad.write_text(json.dumps(config))
    answer = host.fw("version", artefacts=bad)
    assert answer.rc == 2, answer
    assert "--artefacts" in answer.data["message"]
    assert message in answer.data["message"]


def test_a_bundle_on_a_pending_apply_keeps_its_point_and_the_old_verbs_are_gone(host: Host):
    first = host.bundle(nft=nft("replace", nft_rules()))
    assert first.rc == 0, first
    # A bundle on top of the unconfirmed one: the rollback point stays the state before both.
    answer = host.bundle(
        nft=nft("increment", "add element inet portal_fw blocked { 10.9.0.9 }\n"),
        tc=nft("replace", tc_batch(("1:10", "10mbit"))),
    )
    assert answer.rc == 0, answer
    assert answer.data["rollback_point"]["kept"] is True
    assert host.fw("rollback").rc == 0
    assert "portal_fw" not in host.nft_text()
    assert "htb" not in host.tc_text()
    for verb in ("apply", "check", "tc-apply"):  # the second apply path is gone
        old = host.fw(verb, "--confirm-within", "30", input=nft_rules())
        assert (old.rc, old.data["error"]) == (2, "refused"), old
        assert "not allowed" in old.data["message"]
    assert "portal_fw" not in host.nft_text()


# ---- the content digest ----------------------------------------------------------------


def test_the_digest_is_equal_for_the_same_state_in_another_order(host: Host):
    forward = [f"10.0.{i // 250}.{i % 250 + 1} : 10.1.0.{i % 250 + 1}" for i in range(600)]

    def load(elements):
        host.ns_run("nft", "flush", "ruleset")
        host.ns_run("nft", "-f", "-", input=nft_rules(elements=tuple(elements)))
        return host.fw("digest").data["digest"]

    first = load(forward)
    second = load(reversed(forward))
    third = load(forward[::2] + forward[1::2])
    assert first["total"] == second["total"] == third["total"]
    assert first["parts"] == second["parts"]


def _changed(before: dict, after: dict) -> set[str]:
    keys = set(before["parts"]) | set(after["parts"])
    return {k for k in keys if before["parts"].get(k) != after["parts"].get(k)}


def test_the_digest_names_the_part_a_hand_change_touched(baseline: Host):
    host = baseline
    base = host.fw("digest").data["digest"]
    assert host.fw("digest").data["differs_from_applied"] == []

    host.ns_run("nft", "delete", "element", "inet", "portal_fw", "dev4", "{ 10.0.0.2 }")
    step1 = host.fw("digest").data["digest"]
    assert _changed(base, step1) == {"nft:inet portal_fw map dev4"}

    host.ns_run("nft", "add", "rule", "inet", "portal_fw", "forward", "ip", "daddr", "10.9.9.9",
                "drop")  # fmt: skip
    step2 = host.fw("digest").data["digest"]
    assert _changed(step1, step2) == {"nft:inet portal_fw chain forward"}

    host.ns_run("tc", "class", "change", "dev", "dorm0", "parent", "1:", "classid", "1:10", "htb",
                "rate", "11mbit", "ceil", "11mbit")  # fmt: skip
    step3 = host.fw("digest").data["digest"]
    assert _changed(step2, step3) == {"tc:dorm0"}

    (host.etc / "demo.json").write_text('{"v": 9}\n')
    step4 = host.fw("digest").data["digest"]
    assert _changed(step3, step4) == {"file:demo"}
    assert set(host.fw("digest").data["differs_from_applied"]) == {
        "nft:inet portal_fw map dev4",
        "nft:inet portal_fw chain forward",
        "tc:dorm0",
        "file:demo",
    }
    health = host.fw("health", "--sample-ms", "0").data
    assert health["digest"]["total"] == step4["total"]
    assert len(health["digest_differs"]) == 4


def test_traffic_and_counters_do_not_change_the_digest(baseline: Host):
    host = baseline
    host.ns_run("nft", "add", "rule", "inet", "portal_fw", "output", "ip", "daddr", "10.99.0.2",
                "counter")  # fmt: skip
    before = host.fw("digest").data["digest"]
    host.ns_run("ping", "-c", "5", "-i", "0.05", "-W", "1", "10.99.0.2")
    counted = host.ns_run("nft", "list", "chain", "inet", "portal_fw", "output").stdout
    assert "packets 0 " not in counted.split("10.99.0.2")[1]  # the rule did count
    stats = host.ns_run("tc", "-s", "class", "show", "dev", "dorm0").stdout
    assert "Sent 0 bytes" not in stats.split("class htb 1:2 ")[1].split("class")[0]
    after = host.fw("digest").data["digest"]
    assert after == {**before, "seconds": after["seconds"], "nft_seconds": after["nft_seconds"]}


def test_a_map_built_by_increments_digests_like_the_same_map_loaded_in_full(host: Host):
    """nft 1.0.6 ignores -j for `get element` (it prints text) and loads the whole cache for it
    (12.6 s on a 800k-element table), so the helper does not read elements back by key: the
    digest always comes from `nft -j list table`. What it relies on is that the state, not
    the way it was reached, decides the digest (counters and comments included)."""
    elements = [f"198.18.{i // 200}.{i % 200 + 1} . {1024 + i} : 10.0.{i // 200}.{i % 200 + 1} . 22"
                for i in range(400)]  # fmt: skip
    table = (
        "table inet portal_t {\n"
        "\tmap fwd_tcp { type ipv4_addr . inet_service : ipv4_addr . inet_service; counter; }\n"
        "}\n"
    )

    def digest():
        return host.fw("digest").data["digest"]["parts"]["nft:inet portal_t map fwd_tcp"]

    host.ns_run("nft", "-f", "-", input=table + "add element inet portal_t fwd_tcp { "
                + ", ".join(elements) + " }\n")  # fmt: skip
    full = digest()
    host.ns_run("nft", "delete", "table", "inet", "portal_t")
    host.ns_run("nft", "-f", "-", input=table)
    for start in range(0, 400, 100):
        chunk = [*elements[start : start + 100], "198.18.99.1 . 9 : 10.9.9.9 . 9"]
        host.ns_run("nft", "-f", "-", input="add element inet portal_t fwd_tcp { "
                    + ", ".join(reversed(chunk)) + " }\n")  # fmt: skip
        host.ns_run(
            "nft", "delete", "element", "inet", "portal_t", "fwd_tcp", "{ 198.18.99.1 . 9 }"
        )
    assert digest() == full
    json_listing = json.loads(host.ns_run("nft", "-j", "list", "table", "inet", "portal_t").stdout)
    elem = next(i["map"] for i in json_listing["nftables"] if "map" in i)["elem"]
    total, count = multiset_digest(elem)
    assert count == 400
    total_reversed, _ = multiset_digest(reversed(elem))
    assert total == total_reversed


# ---- the netlink reader, incremental read-back ---------------------------------------------


def _inc(text: str) -> dict:
    return nft("increment", text)


def test_incremental_answers_agree_with_a_fresh_full_digest(baseline: Host):
    host = baseline
    first = host.fw("digest").data["digest"]
    assert first["source"] == "netlink"
    assert first["mode"] == "full"
    steps = [
        # adds
        ("add element inet portal_fw dev4 { 10.0.0.3 : 10.1.0.3, 10.0.0.4 : 10.1.0.4 }\n",
         {"nft:inet portal_fw map dev4"}),
        # a delete in another set
        ("delete element inet portal_fw blocked { 10.9.0.2 }\n", {"nft:inet portal_fw set blocked"}),
        # a map value changed (delete + add of the same key), and a flush of a set
        ("delete element inet portal_fw dev4 { 10.0.0.1 }\n"
         "add element inet portal_fw dev4 { 10.0.0.1 : 10.1.0.99 }\n"
         "flush set inet portal_fw blocked\n"
         "add element inet portal_fw blocked { 10.9.0.7 }\n",
         {"nft:inet portal_fw map dev4", "nft:inet portal_fw set blocked"}),
    ]  # fmt: skip
    previous = first
    for text, touched in steps:
        answer = host.bundle(nft=_inc(text))
        assert answer.rc == 0, answer
        digest = answer.data["digest"]
        assert digest["mode"] == "incremental", digest
        assert set(digest["read"]) == touched
        # element-only increments are read from the kernel's element events; a flush dumps
        assert digest["via"] == ("dump" if "flush" in text else "events"), digest
        fresh = host.fw("digest").data
        assert fresh["digest"]["mode"] == "full"
        assert digest["total"] == fresh["digest"]["total"]
        assert digest["parts"] == fresh["digest"]["parts"]
        assert fresh["differs_from_applied"] == []
        assert _changed(previous, digest) == touched
        previous = digest
        assert host.fw("confirm").rc == 0

    # a file and tc in the same bundle: those are read too, and nothing else
    answer = host.bundle(
        nft=_inc("add element inet portal_fw blocked { 10.9.0.8 }\n"),
        tc=nft("increment", "class change dev inet0 parent 1: classid 1:30 htb rate 6mbit "
                            "ceil 6mbit burst 1600 cburst 1600 quantum 1514\n"),
        demo=nft("replace", '{"v": 2}\n'),
    )  # fmt: skip
    assert answer.rc == 0, answer
    digest = answer.data["digest"]
    assert set(digest["read"]) == {"nft:inet portal_fw set blocked", "tc:inet0", "file:demo"}
    assert digest["total"] == host.fw("digest").data["digest"]["total"]

    # a rule or any structure: everything is read again
    answer = host.bundle(nft=_inc("add rule inet portal_fw forward ip daddr 10.9.9.9 drop\n"))
    assert answer.rc == 0, answer
    assert answer.data["digest"]["mode"] == "full"
    assert answer.data["digest"]["total"] == host.fw("digest").data["digest"]["total"]


# The rule set's NAT lives in a table of its own, of the ip family (IPv6 meets no NAT hook).
NAT_TABLE = (
    "table ip portal_nat {\n"
    "\tmap fwd_tcp { type ipv4_addr . inet_service : ipv4_addr . inet_service;"
    " elements = { 10.98.0.1 . 80 : 10.99.0.2 . 80 } }\n"
    "\tchain dstnat {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
    '\t\tiifname != "inet0" accept\n'
    "\t\tmeta l4proto tcp dnat ip addr . port to ip daddr . th dport map @fwd_tcp\n\t}\n"
    "\tchain srcnat {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t}\n"
    "}\n"
)


def test_the_nat_table_is_loaded_digested_and_rolled_back_with_the_filter_table(baseline: Host):
    """A host on the single inet table gets the second table in the full load; the digest
    reads its parts, an increment of its map is element-only (read from the events), and one
    rollback point holds both tables: taken back from one table to two, and from two to one."""
    host = baseline  # inet portal_fw alone
    one = host.snapshot()
    answer = host.bundle(nft=nft("replace", nft_rules() + NAT_TABLE))
    assert answer.rc == 0, answer
    tables = host.ns_run("nft", "list", "tables").stdout
    assert "table inet portal_fw" in tables
    assert "table ip portal_nat" in tables
    parts = set(answer.data["digest"]["parts"])
    assert {"nft:ip portal_nat map fwd_tcp", "nft:ip portal_nat chain dstnat"} <= parts
    assert host.fw("rollback").rc == 0  # two tables -> back to one
    assert host.snapshot() == one
    assert "portal_nat" not in host.ns_run("nft", "list", "tables").stdout

    assert host.bundle(nft=nft("replace", nft_rules() + NAT_TABLE)).rc == 0
    assert host.fw("confirm").rc == 0
    two = host.snapshot()
    step = host.bundle(
        nft=_inc("add element ip portal_nat fwd_tcp { 10.98.0.1 . 8080 : 10.99.0.2 . 80 }\n")
    )
    assert step.rc == 0, step
    assert step.data["digest"]["mode"] == "incremental", step.data
    assert step.data["digest"]["read"] == ["nft:ip portal_nat map fwd_tcp"]
    assert step.data["digest"]["total"] == host.fw("digest").data["digest"]["total"]
    assert "8080" in host.ns_run("nft", "list", "map", "ip", "portal_nat", "fwd_tcp").stdout
    assert host.fw("rollback").rc == 0
    assert host.snapshot() == two
    host.ns_run("nft", "delete", "element", "ip", "portal_nat", "fwd_tcp", "{ 10.98.0.1 . 80 }")
    assert host.fw("digest").data["differs_from_applied"] == ["nft:ip portal_nat map fwd_tcp"]


def test_an_increment_keeps_reporting_a_hand_change_to_another_part(baseline: Host):
    host = baseline
    host.ns_run("nft", "add", "element", "inet", "portal_fw", "blocked", "{ 10.9.9.1 }")
    assert host.fw("digest").data["differs_from_applied"] == ["nft:inet portal_fw set blocked"]
    answer = host.bundle(nft=_inc("add element inet portal_fw dev4 { 10.0.0.5 : 10.1.0.5 }\n"))
    assert answer.rc == 0
    assert answer.data["digest"]["read"] == ["nft:inet portal_fw map dev4"]
    # the part that was not read is the recorded one: the drift stays visible
    health = host.fw("health", "--sample-ms", "0").data
    assert health["digest_differs"] == ["nft:inet portal_fw set blocked"]
    assert "digest" not in host.fw("health", "--sample-ms", "0", "--no-digest").data


def test_interval_and_concatenated_range_sets_digest_the_same_in_any_order(host: Host):
    ranges = [f"10.{i}.0.0/16 . {1000 + 10 * i}-{1005 + 10 * i}" for i in range(40)]
    ranges += ["192.0.2.1 . 80", "198.51.100.0/24 . 443"]
    plain = [f"10.{i}.{j}.0/24" for i in range(5) for j in range(0, 250, 10)]
    plain += ["192.0.2.10-192.0.2.20", "203.0.113.7"]
    table = (
        "table inet portal_iv {\n"
        "\tset ports { type ipv4_addr . inet_service; flags interval; }\n"
        "\tset nets { type ipv4_addr; flags interval; }\n"
        "\tchain input { type filter hook input priority 0; policy accept;"
        " ip saddr . tcp dport @ports counter accept; ip daddr @nets counter; }\n"
        "}\n"
    )

    def load(order_ranges, order_plain, chunks: int) -> dict:
        host.ns_run("nft", "flush", "ruleset")
        text = table
        for k in range(chunks):
            text += (
                "add element inet portal_iv ports { " + ", ".join(order_ranges[k::chunks]) + " }\n"
            )
            text += (
                "add element inet portal_iv nets { " + ", ".join(order_plain[k::chunks]) + " }\n"
            )
        host.ns_run("nft", "-f", "-", input=text)
        return host.fw("digest").data["digest"]

    first = load(ranges, plain, 1)
    assert first["source"] == "netlink"
    second = load(ranges[::-1], plain[::-1], 1)
    third = load(ranges[1::2] + ranges[::2], plain[::3] + plain[1::3] + plain[2::3], 5)
    assert first["parts"] == second["parts"] == third["parts"]
    # a range removed by hand and put back: same state, same digest
    host.ns_run("nft", "delete", "element", "inet", "portal_iv", "ports", "{ " + ranges[3] + " }")
    removed = host.fw("digest").data["digest"]
    assert _changed(third, removed) == {"nft:inet portal_iv set ports"}
    host.ns_run("nft", "add", "element", "inet", "portal_iv", "ports", "{ " + ranges[3] + " }")
    assert host.fw("digest").data["digest"]["parts"] == first["parts"]


def test_expiry_timers_and_element_counters_do_not_count_but_values_do(host: Host):
    host.ns_run("nft", "-f", "-", input=(
        "table inet portal_tm {\n"
        "\tset seen { type ipv4_addr; flags timeout; timeout 1h; elements = { 10.7.0.1, "
        "10.7.0.2 timeout 10m comment \"x\" } }\n"
        "\tmap hits { type ipv4_addr : verdict; counter; elements = { 10.99.0.2 : accept } }\n"
        "\tchain output { type filter hook output priority 0; policy accept;"
        " ip daddr vmap @hits; }\n"
        "}\n"))  # fmt: skip
    before = host.fw("digest").data["digest"]
    host.ns_run("ping", "-c", "3", "-i", "0.05", "-W", "1", "10.99.0.2", check=False)
    time.sleep(1.1)  # the expiry timers moved on
    after = host.fw("digest").data["digest"]
    assert after["parts"] == before["parts"]
    host.ns_run("nft", "delete", "element", "inet", "portal_tm", "hits", "{ 10.99.0.2 }")
    host.ns_run("nft", "add", "element", "inet", "portal_tm", "hits", "{ 10.99.0.2 : drop }")
    assert _changed(after, host.fw("digest").data["digest"]) == {"nft:inet portal_tm map hits"}


def test_the_nft_fallback_is_reported_as_its_source(baseline: Host):
    host = baseline
    argv = ["/usr/bin/python3", "-I", str(HELPER), "--state-dir", str(host.state),
            "--artefacts", str(host.artefacts), "--digest-source", "nft", "digest"]  # fmt: skip
    result = host.ns_run(*argv)
    digest = json.loads(result.stdout.strip().splitlines()[-1])["digest"]
    assert digest["source"] == "nft"
    netlink = host.fw("digest").data["digest"]
    assert netlink["source"] == "netlink"
    assert set(digest["parts"]) == set(netlink["parts"])  # same part names, other hashes


# ---- element-only increments: one netlink batch, refused whole --------------------------------

TYPED = (
    "table inet portal_fw {\n"
    "\tmap fwd_tcp { type ipv4_addr . inet_service : ipv4_addr . inet_service; size 1024;"
    " elements = { 198.18.0.1 . 80 : 10.0.1.1 . 80 } }\n"
    "\tmap shape4 { type ipv4_addr : classid; size 1024; elements = { 10.0.1.1 : 1:10 } }\n"
    "\tmap shape6 { type ipv6_addr : classid; size 1024; }\n"
    "\tset open6_ports { type ipv6_addr . inet_proto . inet_service; size 1024; }\n"
    "\tset acct4_in { type ipv4_addr; size 1024; counter; elements = { 10.0.1.1 } }\n"
    "\tset mgmt4 { type ipv4_addr; flags interval; elements = { 10.255.0.0/24 } }\n"
    "}\n"
)
TYPED_INCREMENT = (
    "# portal increment for host t: a -> b\n"
    "delete element inet portal_fw fwd_tcp { 198.18.0.1 . 80 }\n"
    "add element inet portal_fw fwd_tcp { 198.18.0.1 . 8088 : 10.0.1.1 . 80, "
    "198.18.0.2 . 22 : 10.0.1.2 . 2222 }\n"
    "add element inet portal_fw shape4 { 10.0.1.2 : 1:2a, 10.0.1.3 : ffff:1 }\n"
    "add element inet portal_fw shape6 { 2001:db8:100:1:: : 1:10 }\n"
    "add element inet portal_fw open6_ports { 2001:db8:100:1::1 . tcp . 22, "
    "2001:db8:100:1::1 . udp . 53, 2001:db8:100:1::2 . 132 . 9 }\n"
    "add element inet portal_fw acct4_in { 10.0.1.2, 10.0.1.3 }\n"
    "delete element inet portal_fw acct4_in { 10.0.1.1 }\n"
)


def test_an_element_increment_is_one_netlink_batch_that_builds_what_nft_builds(host: Host):
    assert host.bundle(nft=nft("replace", TYPED)).rc == 0
    answer = host.bundle(nft=_inc(TYPED_INCREMENT))
    assert answer.rc == 0, answer
    assert answer.data["applied_by"] == "element-increment (netlink)"  # no nft process
    assert answer.data["digest"]["mode"] == "incremental"
    by_batch = host.nft_text()
    # The same text and increment loaded by nft itself: the same elements, byte for byte as
    # nft lists them (a classid in the wrong byte order or a port unpadded would show here).
    host.ns_run("nft", "delete", "table", "inet", "portal_fw")
    host.ns_run("nft", "-f", "-", input=TYPED)
    host.ns_run("nft", "-f", "-", input=TYPED_INCREMENT)
    assert by_batch == host.nft_text()
    assert "10.0.1.3 : ffff:1" in by_batch
    assert "2001:db8:100:1::2 . sctp . 9" in by_batch
    # What does not fit the batch (an interval set) goes to nft, in the same way.
    other = host.bundle(nft=_inc("add element inet portal_fw mgmt4 { 10.254.0.0/24 }\n"))
    assert other.rc == 0, other
    assert other.data["applied_by"] == "element-increment (nft)"
    # The journal holds both increments; a rollback restores the point (base + its journal).
    assert (host.state / "nft.journal").read_text().endswith("{ 10.254.0.0/24 }\n")
    assert host.fw("rollback").rc == 0
    assert "10.254.0.0/24" not in host.nft_text()


def _untouched(host: Host) -> tuple:
    state = host.state
    return (
        host.snapshot(),
        host.fw("digest").data["digest"]["total"],
        os.readlink(state / "rollback.d"),
        (state / "rollback.d" / "meta.json").read_text(),
        (state / "state.json").read_text(),
        (state / "nft.current.json").read_text(),
        (state / "nft.journal").read_bytes(),
        (state / "pending.json").exists(),
    )


@pytest.mark.parametrize(
    ("increment", "via", "said"),
    [
        # the add is in the same batch as the refused delete: nothing of it stays
        ("add element inet portal_fw blocked { 10.9.0.7 }\n"
         "delete element inet portal_fw blocked { 10.9.0.99 }\n", "netlink",
         "line 2: delete element inet portal_fw blocked: No such file or directory"),
        ("add element inet portal_fw dev4 { 10.0.0.1 : 10.1.0.9 }\n", "netlink", "exists"),
        ("add element inet portal_fw blocked { 10.9.0.8 }\n"
         "add element inet portal_fw nosuch { 10.9.0.9 }\n", "nft", "nosuch"),
    ],
)  # fmt: skip
def test_a_refused_element_increment_leaves_the_host_exactly_as_it_was(
    baseline: Host, increment, via, said
):
    host = baseline
    increment_first = host.bundle(nft=_inc("add element inet portal_fw blocked { 10.9.0.5 }\n"))
    assert increment_first.rc == 0
    assert host.fw("confirm").rc == 0
    before = _untouched(host)
    answer = host.bundle(nft=_inc(increment))
    assert answer.rc == 1, answer
    assert (answer.data["phase"], answer.data["increment_refused"]) == ("check", True)
    assert answer.data["via"] == via
    assert said in answer.data["detail"]
    assert _untouched(host) == before  # rule set, digest, point, state, record, no timer
    assert "10.9.0.7" not in host.nft_text()
    assert "10.9.0.8" not in host.nft_text()


def test_a_full_replacement_is_checked_by_its_own_load_before_tc_and_files(baseline: Host):
    """No separate nft -c (it costs what the load costs: about 8 s at 100,000 members): the
    full text is loaded first, and a refused one leaves tc, the file, the rule set, the point
    and the timer exactly as they were, answered like a failed check."""
    host = baseline
    increment_first = host.bundle(nft=_inc("add element inet portal_fw blocked { 10.9.0.5 }\n"))
    assert increment_first.rc == 0
    assert host.fw("confirm").rc == 0
    before = _untouched(host)
    demo_before = (host.etc / "demo.json").read_text()
    answer = host.bundle(
        nft=nft("replace", nft_rules(extra_rule="ip daddr @nosuch drop")),
        tc=nft("replace", tc_batch(("1:10", "30mbit"), ("1:12", "2mbit"))),
        demo=nft("replace", '{"v": 2}\n'),
    )
    assert answer.rc == 1, answer
    assert (answer.data["phase"], answer.data["artefact"]) == ("check", "nft")
    assert answer.data["message"] == "nft rejected the rule set"
    assert "nosuch" in answer.data["detail"]  # nft's own message
    assert "increment_refused" not in answer.data
    assert _untouched(host) == before  # rule set, tc, digest, point, state, record, no timer
    assert (host.etc / "demo.json").read_text() == demo_before

    good = host.bundle(
        nft=nft("replace", nft_rules(elements=("10.0.0.7 : 10.1.0.7",))),
        tc=nft("replace", tc_batch(("1:10", "30mbit"))),
    )
    assert good.rc == 0, good
    assert good.data["applied_by"] == "replace"
    assert "10.0.0.7" in host.nft_text()
    assert "30Mbit" in host.tc_text("dorm0")
    assert host.fw("rollback").rc == 0  # the one point still holds nft and tc together
    assert host.snapshot() == before[0]


def counted_rules(count: int, marker: str) -> str:
    """A portal table with `count` counted addresses (what a replacement makes the kernel
    free after its commit) and a one-element marker set telling two texts apart."""
    addresses = ", ".join(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}" for i in range(1, count + 1))
    return (
        "table inet portal_fw {\n"
        f"\tset counted {{ type ipv4_addr; size {count * 2}; counter; elements = {{ {addresses} }} }}\n"
        f"\tset marker {{ type ipv4_addr; elements = {{ {marker} }} }}\n"
        "\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n"
        "\t\tip saddr @counted accept\n\t\tip saddr @marker drop\n\t}\n"
        "}\n"
    )


def _log_events(host: Host, event: str) -> list[dict]:
    lines = (host.state / "log.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def test_a_full_replacement_answers_when_the_kernel_committed_not_when_the_old_tables_are_freed(
    baseline: Host,
):
    """The kernel frees a replaced table's elements after the commit, and the process that
    closes its nftables socket waits for that (about 0.65 s at 100,000 members): the agent
    loads a full text by libnftables in a child and answers on the child's word that the
    transaction committed, while the child still waits to exit. The new rule set is live at
    the answer; a refused text still changes nothing (test above) and the point restores it."""
    host = baseline
    first = host.bundle(nft=nft("replace", counted_rules(100_000, "10.200.0.1")))
    assert first.rc == 0, first
    assert host.fw("confirm").rc == 0
    before = host.ns_run("nft", "list", "set", "inet", "portal_fw", "marker").stdout

    second = host.bundle(nft=nft("replace", counted_rules(100_000, "10.200.0.2")))
    assert second.rc == 0, second
    assert second.data["applied_by"] == "replace"
    marker = host.ns_run("nft", "list", "set", "inet", "portal_fw", "marker").stdout
    assert "10.200.0.2" in marker  # live at the answer
    loaded = _log_events(host, "nft-full-load")[-1]
    assert loaded["rc"] == 0
    # answered while the loader still waited for the kernel to free the 100,000 old elements
    assert loaded["loader_running_at_answer"] is True, loaded

    assert host.fw("rollback").rc == 0  # restored by the same loader: exactly the first text
    assert host.ns_run("nft", "list", "set", "inet", "portal_fw", "marker").stdout == before


# ---- the order of tc and nft: the rule set never names a class that does not exist -------


def shaping_rules(*elements: str) -> str:
    """A rule set whose priority map names HTB classes, as the compiler's shape4 does."""
    return (
        "table inet portal_fw {\n"
        "\tmap shape4 {\n\t\ttype ipv4_addr : classid\n"
        + (f"\t\telements = {{ {', '.join(elements)} }}\n" if elements else "")
        + "\t}\n"
        "\tchain postrouting {\n\t\ttype filter hook postrouting priority 0; policy accept;\n"
        '\t\toifname "dorm0" meta priority set ip daddr map @shape4\n'
        "\t}\n"
        "}\n"
    )


class Monitor:
    """`tc monitor` and `nft monitor` of a namespace, their events in one list in the order the
    kernel sent them. Both monitors write into one pipe, at real-time priority, so each writes
    its line as soon as the kernel wakes it: two pipes read by two threads ordered the lines by
    when Python read them (the agent's steps are separate processes, milliseconds apart, and
    one CI run saw a class deleted "before" the nft batch that preceded it)."""

    TC_LINE = re.compile(r"^(deleted )?(class|qdisc|filter|chain|action)\b")

    def __init__(self, ns: str) -> None:
        import threading

        self.events: list[tuple[str, str]] = []
        read_end, write_end = os.pipe()
        self.procs = [
            subprocess.Popen(
                ["ip", "netns", "exec", ns, "chrt", "-f", "50", "stdbuf", "-oL", *argv],
                stdout=write_end,
            )
            for argv in (["tc", "monitor"], ["nft", "monitor"])
        ]
        os.close(write_end)
        self.reader = threading.Thread(target=self.read, args=(read_end,), daemon=True)
        self.reader.start()
        time.sleep(0.5)  # both subscribed

    def read(self, fd: int) -> None:
        with open(fd, encoding="utf-8") as stream:  # lines of one write each (< PIPE_BUF)
            for line in stream:
                line = line.strip()
                if line:
                    self.events.append(("tc" if self.TC_LINE.match(line) else "nft", line))

    def stop(self) -> list[tuple[str, str]]:
        time.sleep(0.5)
        for proc in self.procs:  # our own monitors, by their Popen objects
            proc.terminate()
            proc.wait(timeout=5)
        self.reader.join(timeout=5)
        return list(self.events)


def first(events: list[tuple[str, str]], source: str, test) -> int:
    return next(i for i, (s, line) in enumerate(events) if s == source and test(line))


def last(events: list[tuple[str, str]], source: str, test) -> int:
    return max(i for i, (s, line) in enumerate(events) if s == source and test(line))


def test_classes_are_made_before_the_rule_set_names_them_and_removed_after(host: Host):
    """Issue 26: the agent loaded nft before tc, so when a change added a class, the new
    priority map named it before tc built it (its members' packets fell into the default
    class meanwhile), and a removed class went with tc only after. Now a class is made before
    the nft that names it and removed after the nft that stops naming it: as a full
    replacement (the tree kept) and as an increment (element batch + class add/del)."""

    def cls(classid: str, rate: str = "10mbit") -> str:
        return (f"class replace dev dorm0 parent 1: classid {classid} htb rate {rate} "
                f"ceil {rate} burst 1600 cburst 1600 quantum 1514\n")  # fmt: skip

    head = tc_batch()  # the root HTB and its default class 1:2
    first_answer = host.bundle(
        nft=nft("replace", shaping_rules("10.99.0.2 : 1:10")), tc=nft("replace", head + cls("1:10"))
    )
    assert first_answer.rc == 0, first_answer
    assert host.fw("confirm").rc == 0

    monitor = Monitor(host.ns)
    answer = host.bundle(
        nft=nft("replace", shaping_rules("10.99.0.2 : 1:12")), tc=nft("replace", head + cls("1:12"))
    )
    events = monitor.stop()
    assert answer.rc == 0, answer
    assert answer.data["tc_tree"] == {"kept": ["dorm0"], "built": []}
    assert "1:12" in host.nft_text()
    assert "1:10" not in host.tc_text()
    made = first(events, "tc", lambda line: line.startswith("class htb 1:12 "))
    removed = first(events, "tc", lambda line: line.startswith("deleted class htb 1:10 "))
    assert made < first(events, "nft", lambda line: True), events
    assert removed > last(events, "nft", lambda line: True), events
    assert host.fw("confirm").rc == 0

    monitor = Monitor(host.ns)
    answer = host.bundle(
        nft=nft(
            "increment",
            "delete element inet portal_fw shape4 { 10.99.0.2 }\n"
            "add element inet portal_fw shape4 { 10.99.0.2 : 1:14 }\n",
        ),
        tc=nft(
            "increment",
            "class del dev dorm0 classid 1:12\n" + cls("1:14").replace("replace", "add"),
        ),
    )
    events = monitor.stop()
    assert answer.rc == 0, answer
    assert answer.data["applied_by"] == "element-increment (netlink)"
    made = first(events, "tc", lambda line: line.startswith("class htb 1:14 "))
    removed = first(events, "tc", lambda line: line.startswith("deleted class htb 1:12 "))
    named = first(events, "nft", lambda line: "1:14" in line)
    assert made < named < removed, events


def test_a_refused_rule_set_takes_back_the_classes_made_before_it(host: Host):
    """The classes go first now, so an nft text refused by its own load (checked that way:
    a full replacement, an element increment) must take them back: the host is as it was and
    the answer is still a refusal at the check."""

    def cls(classid: str) -> str:
        return (f"class replace dev dorm0 parent 1: classid {classid} htb rate 10mbit "
                "ceil 10mbit burst 1600 cburst 1600 quantum 1514\n")  # fmt: skip

    ok = host.bundle(
        nft=nft("replace", shaping_rules("10.99.0.2 : 1:10")),
        tc=nft("replace", tc_batch() + cls("1:10")),
    )
    assert ok.rc == 0, ok
    assert host.fw("confirm").rc == 0
    before = _untouched(host)
    refused = host.bundle(  # the element is there already: the kernel refuses the batch
        nft=nft("increment", "add element inet portal_fw shape4 { 10.99.0.2 : 1:16 }\n"),
        tc=nft("increment", cls("1:16").replace("replace", "add")),
    )
    assert refused.rc == 1, refused
    assert refused.data["phase"] == "check"
    assert refused.data["increment_refused"] is True
    assert "1:16" not in host.tc_text()
    assert _untouched(host) == before
    full = host.bundle(
        nft=nft(
            "replace",
            shaping_rules("10.99.0.2 : 1:10").replace(
                "}\n}\n", "\tip daddr @nosuch drop\n\t}\n}\n"
            ),
        ),
        tc=nft("replace", tc_batch() + cls("1:10") + cls("1:18")),
    )
    assert (full.rc, full.data["phase"]) == (1, "check"), full
    assert "1:18" not in host.tc_text()
    assert _untouched(host) == before


# ---- a removed key's counters are carried ------------------------------------------------


def acct_rules(*keys: str, extra_rule: str = "", filler: int = 0) -> str:
    """A counted set acct4_in (what goes out to its keys), and `filler` elements in a plain set
    (a text that takes the loader a while)."""
    plain = ", ".join(f"10.{200 + i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(filler))
    return (
        "table inet portal_fw {\n"
        "\tset acct4_in {\n\t\ttype ipv4_addr\n\t\tcounter\n"
        "\t\telements = { "
        + ", ".join(keys)
        + " }\n\t}\n"
        + (f"\tset filler {{ type ipv4_addr; elements = {{ {plain} }} }}\n" if filler else "")
        + "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n"
        "\t\tip daddr @acct4_in\n"
        f"\t\t{extra_rule}\n"
        "\t}\n"
        "}\n"
    )


def test_a_full_replacement_keeps_the_traffic_totals_through_a_refusal_and_a_killed_agent(
    host: Host,
):
    """Issue 26: a full replacement starts every element counter at zero; the agent reads them
    while its loader parses the new text and carries them once the old table is gone. What a
    key counted before a replacement stays in the `traffic` verb's totals, exactly once: after
    a replacement the kernel refuses, after a good one, and after an agent killed between its
    reading and its commit (the loader commits without it), then a rollback."""
    keys = ("10.99.0.2", "10.99.0.3")
    assert host.bundle(nft=nft("replace", acct_rules(*keys))).rc == 0
    assert host.fw("confirm").rc == 0
    pending = host.state / "acct.pending.json"

    def counted() -> dict:
        rows = host.fw("traffic").data["sets"].get("acct4_in", [])
        return {key: (packets, octets) for key, packets, octets in rows}

    def ping(count: int) -> None:
        host.ns_run("ping", "-c", str(count), "-i", "0.2", "-s", "1000", "-q", "10.99.0.2")

    ping(3)
    before = counted()
    assert before["10.99.0.2"] == (3, 3 * 1028)

    refused = host.bundle(nft=nft("replace", acct_rules(*keys, extra_rule="ip daddr @no drop")))
    assert refused.rc != 0, refused  # refused by the kernel's load itself (no separate check)
    assert counted() == before
    assert not pending.exists()

    ping(2)
    assert host.bundle(nft=nft("replace", acct_rules(*keys, "10.99.0.4"))).rc == 0
    assert host.fw("confirm").rc == 0
    assert "10.99.0.4" in host.nft_text()  # replaced: the kernel's counters started at zero
    assert counted() == {"10.99.0.2": (5, 5 * 1028)}
    assert counted() == {"10.99.0.2": (5, 5 * 1028)}  # read again: nothing added twice
    assert not pending.exists()

    # The agent dies after its reading, before the commit: its loader commits anyway (the
    # gate it waits at opens when the agent's end of it closes).
    ping(1)
    agent = subprocess.Popen(
        ["ip", "netns", "exec", host.ns, "/usr/bin/python3", "-I", "-S", str(HELPER),
         "--state-dir", str(host.state), "--artefacts", str(host.artefacts), "apply-bundle",
         "--confirm-within", "60"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    agent.stdin.write(bundle(nft=nft("replace", acct_rules(*keys, "10.99.0.5", filler=60000))))
    agent.stdin.close()
    deadline = time.monotonic() + 30
    while not pending.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    agent.kill()  # `ip netns exec` ran the agent in its own process
    agent.wait(timeout=10)
    assert pending.exists()  # killed before its work after the answer folded it
    assert wait_for(lambda: "10.99.0.5" in host.ns_run("nft", "list", "set", "inet",
                                                       "portal_fw", "acct4_in").stdout, 30)  # fmt: skip
    assert counted() == {"10.99.0.2": (6, 6 * 1028)}
    assert not pending.exists()
    assert counted() == {"10.99.0.2": (6, 6 * 1028)}
    assert host.fw("rollback").rc == 0  # back to the confirmed text: one more replacement
    assert "10.99.0.5" not in host.nft_text()
    ping(1)
    assert counted() == {"10.99.0.2": (7, 7 * 1028)}


def test_an_increment_that_removes_a_counted_key_carries_its_counters(host: Host):
    """Issue 26: a device removed between two traffic readings took what its element had
    counted since the last one along with the element. The agent now reads the counters of
    the accounting elements an increment deletes right before it and carries them: the
    `traffic` verb still answers them (and the portal attributes them to the key's last
    owner, docs/traffic.md)."""
    rules = (
        "table inet portal_fw {\n"
        "\tset acct4_in {\n\t\ttype ipv4_addr\n\t\tcounter\n"
        "\t\telements = { 10.99.0.2, 10.99.0.3 }\n\t}\n"
        "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n"
        "\t\tip daddr @acct4_in\n"
        "\t}\n"
        "}\n"
    )
    first_answer = host.bundle(nft=nft("replace", rules))
    assert first_answer.rc == 0, first_answer
    assert host.fw("confirm").rc == 0
    host.ns_run("ping", "-c", "3", "-i", "0.2", "-s", "1000", "-q", "10.99.0.2")

    def counted() -> dict:
        rows = host.fw("traffic").data["sets"].get("acct4_in", [])
        return {key: (packets, octets) for key, packets, octets in rows}

    before = counted()
    assert before["10.99.0.2"][0] == 3  # three echo requests of 1028 bytes
    answer = host.bundle(
        nft=nft("increment", "delete element inet portal_fw acct4_in { 10.99.0.2 }\n")
    )
    assert answer.rc == 0, answer
    assert "10.99.0.2" not in host.nft_text()
    assert counted() == before  # carried, not lost with the element
    assert host.fw("rollback").rc == 0  # the element is back at zero: the total runs on
    assert counted() == before
