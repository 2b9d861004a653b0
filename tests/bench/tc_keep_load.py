"""One full tc load the way the host agent applies it, timed; run inside a namespace.

    ip netns exec NS python -m tests.bench.tc_keep_load TREE.tc STATE_DIR

`portal_fw.tc.apply(host, "replace", text)`: the tree planned against what each device runs
(portal_fw/tctree.py: kept when the layout is the same, built through pfifo otherwise), one
`tc -batch`, tc.current written. Prints one JSON object: seconds of the whole apply and of the
plan alone (read + plan, measured once before), the tc child's CPU time, kept/built devices.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "firewall"))

from portal_fw import tc, tctree  # the host package, beside the portal
from portal_fw.host import Host


def main() -> None:
    text = Path(sys.argv[1]).read_text()
    state = Path(sys.argv[2])
    state.mkdir(parents=True, exist_ok=True)
    host = Host(state, "bench")
    start = time.perf_counter()
    planned = tctree.plan(text)
    plan_seconds = time.perf_counter() - start
    before = os.times()
    start = time.perf_counter()
    summary = tc.apply(host, "replace", text)
    wall = time.perf_counter() - start
    after = os.times()
    print(json.dumps({  # noqa: T201
        "wall": wall,
        "plan": plan_seconds,
        "lines": planned.text.count("\n"),
        "sys": after.children_system - before.children_system,
        "user": after.children_user - before.children_user,
        **summary,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
