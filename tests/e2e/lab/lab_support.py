"""Helpers for the lab tests: run lab.sh, talk to the firewall helper over SSH, tiny rule sets."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LAB_SH = REPO / "deploy" / "lab" / "lab.sh"
LAB_VAR = REPO / "var" / "lab"
HOSTS = {"pl-nat1": "10.255.255.11", "pl-nat2": "10.255.255.12"}


MGMT = {"pl-nat1": "10.255.255.11", "pl-nat2": "10.255.255.12"}
# Workers in lab tests: a dead run's lock expires fast; unconfirmed applies revert fast.
WORKER_ENV = {"PORTAL_FIREWALL_LOCK_TTL": "5", "PORTAL_FIREWALL_CONFIRM_WITHIN": "10"}


def run(*argv: str, input: str | None = None, timeout: float = 30, env=None):
    return subprocess.run(
        list(argv),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def lab_sh(*args: str, env_extra: dict | None = None, timeout: float = 60):
    env = {**os.environ, **(env_extra or {})}
    return run(str(LAB_SH), *args, timeout=timeout, env=env)


def ssh_argv(host: str, *, known_hosts: Path | None = None) -> list[str]:
    """The command line the portal's pushes amount to (asyncssh does the same in-process)."""
    return [
        "timeout",
        "20",
        "ssh",
        "-F",
        "none",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts or LAB_VAR / 'known_hosts'}",
        "-o",
        "ConnectTimeout=5",
        "-i",
        str(LAB_VAR / "portal_ed25519"),
        f"root@{HOSTS[host]}",
    ]


@dataclass
class Answer:
    rc: int
    data: dict | None
    stdout: str
    stderr: str


def fw(host: str, command: str, input: str | None = None) -> Answer:
    """Run one helper verb on a lab firewall over SSH; parse its JSON answer."""
    result = run(*ssh_argv(host), command, input=input if input is not None else "", timeout=30)
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    except ValueError:
        data = None
    return Answer(result.returncode, data, result.stdout, result.stderr)


def label(name: str) -> str:
    """A bundle version for a test's short name (bundle versions are 64 hex digits)."""
    return hashlib.sha256(name.encode()).hexdigest()


def bundle_of(nft_text: str, version: str, mode: str = "replace", **files: str) -> str:
    """apply-bundle's input carrying `nft_text` (and file artefacts) as version `label(version)`."""
    artefacts = {"nft": {"mode": mode, "text": nft_text}}
    artefacts.update({name: {"mode": "replace", "text": text} for name, text in files.items()})
    return json.dumps({"format": 1, "version": label(version), "artefacts": artefacts})


def apply(host: str, nft_text: str, version: str, *, confirm_within: int = 30, extra: str = ""):
    """One apply-bundle of a plain rule set (one-shot over SSH)."""
    command = f"apply-bundle --confirm-within {confirm_within} {extra}".strip()
    return fw(host, command, bundle_of(nft_text, version))


def push(host: str, nft_text: str, version: str = "pushed") -> None:
    """apply-bundle + confirm, asserting both worked."""
    applied = apply(host, nft_text, version)
    assert applied.rc == 0, applied.stdout + applied.stderr
    assert fw(host, "confirm").rc == 0


def in_ns(ns: str, *argv: str, input: str | None = None, timeout: float = 10):
    return run("ip", "netns", "exec", ns, *argv, input=input, timeout=timeout)


def ruleset(
    version: str,
    *,
    forward_policy: str = "accept",
    allow: tuple[str, ...] = (),
    nat: tuple[tuple[str, str], ...] = (),
) -> str:
    """A tiny rule set: the version marker, a forward chain, optional 1:1 NAT (public, private)."""
    lines = [
        "table inet portal_meta {",
        f'\tcomment "portal-version={version}"',
        "}",
        "table inet portal_filter {",
        "\tchain forward {",
        f"\t\ttype filter hook forward priority 0; policy {forward_policy};",
        "\t\tct state established,related accept",
        *(f"\t\t{rule}" for rule in allow),
        "\t}",
        "}",
    ]
    if nat:
        lines += [
            "table ip portal_nat {",
            "\tchain prerouting {",
            "\t\ttype nat hook prerouting priority dstnat; policy accept;",
            *(f"\t\tip daddr {pub} dnat to {priv}" for pub, priv in nat),
            "\t}",
            "\tchain postrouting {",
            "\t\ttype nat hook postrouting priority srcnat; policy accept;",
            *(f'\t\tip saddr {priv} oifname "inet0" snat to {pub}' for pub, priv in nat),
            "\t}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def portal_tables_text(host: str) -> str:
    """What the kernel of that host holds in its portal tables (root's view, not over SSH)."""
    return in_ns(host, "nft", "-s", "list", "ruleset").stdout


def wait_for(predicate, timeout: float, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def reset_host(host: str) -> None:
    """Empty a lab firewall's portal tables and helper state (as root on the host would)."""
    in_ns(host, "nft", "flush", "ruleset")
    for dev in ("dorm0", "inet0"):  # shaping left by an earlier push (fails when there is none)
        in_ns(host, "tc", "qdisc", "del", "dev", dev, "root")
    state = LAB_VAR / host / "fw"
    for name in ("pending.json", "state.json", "nft.current", "nft.current.json", "nft.journal",
                 "tc.current"):  # fmt: skip
        (state / name).unlink(missing_ok=True)  # pending gone: an armed timer exits by itself
    if (state / "rollback.d").is_symlink():
        (state / "rollback.d").unlink()


def make_run_pid(pid_file: Path | None = None) -> int | None:
    """The pid of a running `make run` (deploy/dev/run.sh writes it), or None."""
    pid_file = pid_file or Path(__file__).resolve().parents[3] / "var/run/make-run.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"honcho" in cmdline else None
