"""Benchmark of the compiler on the synthetic design target (20,000 members by default).

    python -m workers.ruleset.bench [--members 20000] [--no-load]

Prints: snapshot construction, snapshot -> text (cold: first compile in the process; warm: the
steady state of a worker), text size, peak Python memory of a compile (tracemalloc), and, as
root, `nft -f` / `tc -batch` load times into a fresh namespace `pl-cbench` plus one incremental
change (one forward) applied on top; the namespace is always deleted afterwards.
Targets (issue 5): text < 0.25 s, text < 12 MB, peak < 300 MB, nft -f < 2.5 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from workers.ruleset import compile_snapshot, diff
from workers.ruleset.snapshot import PortForward, Snapshot
from workers.ruleset.synthetic import synthetic_snapshot

NS = "pl-cbench"


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def _ns(*cmd: str, stdin_file: str | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(["ip", "netns", "exec", NS, *cmd], check=True, timeout=300, capture_output=True)  # noqa: S603, S607
    return time.perf_counter() - start


def one_forward_changed(snap: Snapshot) -> Snapshot:
    """The same snapshot with the last member's first forward moved to another port."""
    last = snap.members[-1]
    f = last.forwards[0]
    moved = PortForward(f.id, f.protocol, 8088, f.device_id, f.target_ports)
    member = dataclasses.replace(last, forwards=(moved, *last.forwards[1:]))
    return Snapshot(snap.policy, snap.host, (*snap.members[:-1], member))


def main() -> int:
    """Run the benchmark and print one line per figure."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=20_000)
    parser.add_argument("--no-load", action="store_true", help="skip the namespace load timings")
    args = parser.parse_args()
    out = sys.stdout.write

    snap, t_snap = _timed(synthetic_snapshot, args.members)
    compiled, t_cold = _timed(compile_snapshot, snap)
    warm = min(_timed(compile_snapshot, snap)[1] for _ in range(5))
    tracemalloc.start()
    compile_snapshot(snap)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    elements = sum(
        v
        for k, v in compiled.counts.items()
        if k.startswith("portal_fw.") and k != "portal_fw.rules"
    )
    out(f"members                 {args.members}\n")
    out(f"set/map elements        {elements}\n")
    out(f"htb classes             {compiled.counts['htb.classes']}\n")
    out(f"snapshot construction   {t_snap:.3f} s (synthetic data incl. ipaddress objects)\n")
    out(f"snapshot -> text, cold  {t_cold:.3f} s\n")
    out(f"snapshot -> text, warm  {warm:.3f} s (best of 5)\n")
    out(
        f"text size               {len(compiled.nft) / 1e6:.2f} MB (tc batch {len(compiled.tc) / 1e6:.2f} MB)\n"
    )
    out(f"peak memory (compile)   {peak / 1e6:.1f} MB\n")
    changed = compile_snapshot(one_forward_changed(snap))
    step, t_diff = _timed(diff, compiled, changed)
    if step is None:
        raise RuntimeError("one changed forward should be an incremental change")
    out(
        f"diff, one forward       {t_diff:.3f} s, {len(step.nft)} bytes, +{step.added} -{step.deleted}\n"
    )

    if args.no_load or os.geteuid() != 0 or shutil.which("nft") is None:
        out("namespace loads         skipped (needs root and nft)\n")
        return 0
    subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True, timeout=30)  # noqa: S603, S607
    try:
        subprocess.run(["ip", "netns", "add", NS], check=True, timeout=30)  # noqa: S603, S607
        for dev in snap.host.member_interfaces + snap.host.uplink_interfaces:
            _ns("ip", "link", "add", dev, "type", "veth", "peer", "name", f"{dev}-p"[:15])
        with tempfile.TemporaryDirectory(prefix="pl-cbench-") as tmp:
            full, tc, inc = Path(tmp, "full.nft"), Path(tmp, "full.tc"), Path(tmp, "inc.nft")
            full.write_text(compiled.nft)
            tc.write_text(compiled.tc)
            inc.write_text(step.nft)
            out(f"nft -f, fresh namespace {_ns('nft', '-f', str(full)):.3f} s\n")
            out(f"nft -f, replace loaded  {_ns('nft', '-f', str(full)):.3f} s\n")
            out(f"tc -batch               {_ns('tc', '-batch', str(tc)):.3f} s\n")
            out(
                f"nft -f, one forward     {_ns('nft', '-f', str(inc)):.3f} s (incremental, one nft call)\n"
            )
            t_read = _ns("nft", "list", "set", "inet", "portal_fw", "version")
            out(f"read version marker     {t_read:.3f} s\n")
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True, timeout=30)  # noqa: S603, S607
    return 0


if __name__ == "__main__":
    sys.exit(main())
