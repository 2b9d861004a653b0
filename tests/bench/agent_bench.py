"""The host agent alone (deploy/firewall/portal_fw): cold start and steady changes.

In a bench namespace (pl-cba*) with the synthetic host's interfaces, one agent runs as the
forced command would start it (`python3 -I -S deploy/firewall/portal-fw ... ` with
SSH_ORIGINAL_COMMAND="agent --protocol N", its run directory on a tmpfs as installed:
`--run-dir /run/portal-fw`), over pipes instead of SSH. Measured:

* cold start: process start -> hello, and -> the first answer (`version`);
* a full bundle (nft + tc replace) applied and confirmed;
* steady changes: one forward moved and back, each an element-only nft increment sent as
  apply-bundle (health sample 0 ms, as the rollout sends it) + confirm. `agent_seconds` is the
  agent's own time per request (line in -> answer out); `round` adds the pipes.

    ip netns ... ; .venv/bin/python -m tests.bench.agent_bench [MEMBERS ...]   (JSON on stdout)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.bench.ruleset_bench import _host_links, namespaces, one_forward_changed
from tests.bench.synthetic import synthetic_snapshot
from workers.ruleset import compile_snapshot
from workers.ruleset.diff import diff

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "deploy" / "firewall" / "portal-fw"
sys.path.insert(0, str(ROOT / "deploy" / "firewall"))
from portal_fw import AGENT_PROTOCOL  # noqa: E402

CHANGES = 40


class Agent:
    def __init__(self, ns: str, state: str, run: str) -> None:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "SSH_ORIGINAL_COMMAND": f"agent --protocol {AGENT_PROTOCOL}"}  # fmt: skip
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/bin/python3", "-I", "-S", str(LAUNCHER),
             "--state-dir", state, "--run-dir", run, "--host-name", "bench"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        self.hello = json.loads(self.proc.stdout.readline())
        self.hello_seconds = time.perf_counter() - self.started
        self.next = 0

    def ask(
        self, verb: str, args: dict | None = None, given: str | None = None
    ) -> tuple[dict, float]:
        self.next += 1
        head = json.dumps({"id": self.next, "verb": verb, "args": args or {}})
        line = head if given is None else f'{head[:-1]}, "input": {given}}}'
        start = time.perf_counter()
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        seconds = time.perf_counter() - start
        if not answer.get("ok"):
            raise RuntimeError(f"{verb}: {answer}")
        return answer, seconds

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def tmpfs_directory() -> str | None:
    """/run or /dev/shm when it is a tmpfs (/run is one on Debian; not on every VM)."""
    with open("/proc/mounts", encoding="ascii", errors="replace") as fh:
        mounts = {
            fields[1]: fields[2] for fields in (line.split() for line in fh) if len(fields) > 2
        }
    for path in ("/run", "/dev/shm"):
        if mounts.get(path) == "tmpfs" and os.access(path, os.W_OK):
            return path
    return None


@contextlib.contextmanager
def run_directory() -> Iterator[str]:
    """The agent's run directory on a tmpfs, as installed (--run-dir /run/portal-fw)."""
    path = tempfile.mkdtemp(prefix="portal-fw-bench-", dir=tmpfs_directory())
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def bundle(version: str, nft: tuple[str, str], tc: tuple[str, str] | None) -> str:
    artefacts = {"nft": {"mode": nft[0], "text": nft[1]}}
    if tc is not None and tc[1]:
        artefacts["tc"] = {"mode": tc[0], "text": tc[1]}
    return json.dumps({"format": 1, "version": version, "artefacts": artefacts})


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def one_size(members: int) -> dict:
    snap = synthetic_snapshot(members)
    moved = one_forward_changed(snap)
    a, b = compile_snapshot(snap), compile_snapshot(moved)
    there, back = diff(a, b), diff(b, a)
    if there is None or back is None:
        raise RuntimeError("the forward change is not an increment")
    ns = f"pl-cba{members % 1000}"
    out: dict = {"members": members, "elements_changed": there.added + there.deleted}
    with tempfile.TemporaryDirectory() as tmp, namespaces(ns), run_directory() as run:
        _host_links(ns, snap.host)
        agent = Agent(ns, str(Path(tmp, "state")), run)
        try:
            _, first = agent.ask("version")
            out["cold_hello"] = agent.hello_seconds
            out["cold_first_answer"] = agent.hello_seconds + first
            full, out["full_round"] = agent.ask(
                "apply-bundle", {"confirm_within": 600, "health_sample_ms": 0},
                bundle(a.content_hash, ("replace", a.nft), ("replace", a.tc)),
            )  # fmt: skip
            out["full_agent"] = full["agent_seconds"]
            agent.ask("confirm")
            applies, confirms, rounds = [], [], []
            for i in range(CHANGES):
                step = there if i % 2 == 0 else back
                target = b if i % 2 == 0 else a
                payload = bundle(target.content_hash, ("increment", step.nft),
                                 ("increment", step.tc) if step.tc else None)  # fmt: skip
                applied, round_apply = agent.ask(
                    "apply-bundle", {"confirm_within": 600, "health_sample_ms": 0}, payload
                )
                confirmed, round_confirm = agent.ask("confirm")
                if applied["digest"].get("mode") != "incremental":
                    raise RuntimeError(f"not an incremental digest: {applied['digest']}")
                out["applied_by"] = applied["applied_by"]
                applies.append(applied["agent_seconds"])
                confirms.append(confirmed["agent_seconds"])
                rounds.append(round_apply + round_confirm)
            steady = [x + y for x, y in zip(applies, confirms, strict=True)]
            out.update(
                steady_p50=statistics.median(steady), steady_p95=p95(steady),
                apply_p50=statistics.median(applies), apply_p95=p95(applies),
                confirm_p50=statistics.median(confirms), round_p50=statistics.median(rounds),
                round_p95=p95(rounds), changes=CHANGES,
            )  # fmt: skip
        finally:
            agent.close()
    out["profile"] = profile_steady(ns + "p", snap, a, there)
    return out


def profile_steady(ns: str, snap, a, there) -> str:
    """Where one steady apply's time goes: the agent's functions under cProfile (in-process,
    inside the namespace's network stack via setns), top 12 by cumulative time."""
    code = f"""
import cProfile, ctypes, io, json, os, pstats, sys
sys.path.insert(0, {str(ROOT / "deploy" / "firewall")!r})
from portal_fw.agent import Agent
from portal_fw.host import Host
fd = os.open('/run/netns/{ns}', os.O_RDONLY)
ctypes.CDLL(None, use_errno=True).setns(fd, 0)
state = __import__('pathlib').Path(sys.argv[1])
state.mkdir()
agent = Agent(Host(state, 'bench', run_dir=__import__('pathlib').Path(sys.argv[4])), 1 << 30)
full, inc = json.loads(open(sys.argv[2]).read()), json.loads(open(sys.argv[3]).read())
agent.answer('apply-bundle', {{'confirm_within': 600, 'health_sample_ms': 0}}, full)
agent.answer('confirm', {{}})
agent.host.run_later()
prof = cProfile.Profile()
prof.enable()
agent.answer('apply-bundle', {{'confirm_within': 600, 'health_sample_ms': 0}}, inc)
prof.disable()
agent.answer('confirm', {{}})
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats('cumulative').print_stats(25)
print(s.getvalue())
"""
    with tempfile.TemporaryDirectory() as tmp, namespaces(ns), run_directory() as run:
        _host_links(ns, snap.host)
        full = Path(tmp, "full.json")
        full.write_text(bundle(a.content_hash, ("replace", a.nft), ("replace", a.tc)))
        inc = Path(tmp, "inc.json")
        inc.write_text(
            bundle(
                "b" * 64, ("increment", there.nft), ("increment", there.tc) if there.tc else None
            )
        )
        done = subprocess.run(
            [sys.executable, "-I", "-c", code, str(Path(tmp, "state")), str(full), str(inc), run],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode:
            return f"profile failed: {done.stderr.strip()[-500:]}"
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        return "\n".join(lines[:40])


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [50, 20_000]
    results = [one_size(n) for n in sizes]
    run_on = tmpfs_directory() or "the disk (no tmpfs found)"
    print(json.dumps({"loadavg": os.getloadavg(), "run_dir": run_on, "sizes": results}))  # noqa: T201


if __name__ == "__main__":
    main()
