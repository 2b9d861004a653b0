"""tc layouts: the full shaping tree at 12,500 to 50,000 classes, loaded side by side in the
layouts a big site could use (issue 26, "Full loads that fit"; root, real tc in a namespace).

Run by tests/bench/run.py in a subprocess (root, for the namespace); prints one JSON object.

Method. A namespace pl-cbtc with the host's two shaping links (veth dorm0 and inet0, as many transmit
queues as the layout has); the classes are the compiler's own lines (workers.ruleset.render: shaper_roots and
class_line), split evenly over the two links (download and upload: one class per shaped member
on each), rates drawn from three profiles. Each layout is loaded into freshly made links, timed
from start to exit, with the child's user and system CPU time (os.wait4): user time is tc's own
parsing, system time the kernel (rtnl, the qdisc). Layouts: `htb` (one HTB root per link, one
tc -batch: what the compiler emits by default), `mqN` (mq and one HTB per queue, one batch: the
compiler's mq layout with N queues), `... x2` (the same text as one batch per link, both running
at once: rtnl serialises them). Then the member classes once more onto the tree just built
(`class replace` of classes that exist): what a full load costs that keeps the tree. No filters in any: the nft `shape` chain classifies
(`meta priority set` map), so there is no tc filter to scale.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from tests.bench.ruleset_bench import _run, namespaces
from workers.ruleset.ir import HtbClass, Shaper
from workers.ruleset.render import class_line, shaper_roots
from workers.ruleset.snapshot import ShapingRoot

NS = "pl-cbtc"
DEVS = ("dorm0", "inet0")
# layout, root, transmit queues, one batch per link at once, largest size measured (the single
# HTB root grows quadratically: 50,000 classes would hold the machine for minutes)
LAYOUTS = (
    ("htb", ShapingRoot.HTB, 1, False, 25_000),
    ("htb x2", ShapingRoot.HTB, 1, True, 12_500),
    ("mq8", ShapingRoot.MQ, 8, False, 50_000),
    ("mq8 x2", ShapingRoot.MQ, 8, True, 12_500),
    ("mq32", ShapingRoot.MQ, 32, False, 50_000),
    ("mq64", ShapingRoot.MQ, 64, False, 50_000),
)
PROFILES = ((2_000, 4_000), (10_000, 20_000), (50_000, 100_000))
LIMIT = 300  # seconds for one batch: a layout slower than this is reported as such


def batch(dev: str, root: ShapingRoot, classes: int, queues: int) -> str:
    majors = [0x100 + q for q in range(queues)] if root is ShapingRoot.MQ else [0x1]
    members = [
        HtbClass(majors[m % len(majors)], 0x10 + m, *PROFILES[m % len(PROFILES)])
        for m in range(classes)
    ]
    sh = Shaper(dev=dev, root=root, queues=queues, link_kbit=10_000_000, classes=tuple(members))
    return "".join(shaper_roots(sh)) + "".join(class_line("replace", dev, c) for c in members)


def links(queues: int) -> None:
    for dev in DEVS:
        _run("ip", "link", "del", dev, ns=NS, check=False)
        q = str(queues)
        _run("ip", "link", "add", dev, "numtxqueues", q, "numrxqueues", q, "type", "veth",
             "peer", "name", f"pl-p{dev}", "numtxqueues", q, "numrxqueues", q, ns=NS)  # fmt: skip
        _run("ip", "link", "set", dev, "up", ns=NS)


def load(paths: list[str]) -> dict:
    """Run one `tc -batch` per path at once: wall time until the last exits."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            ["ip", "netns", "exec", NS, "tc", "-batch", p],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for p in paths
    ]
    failed = ""
    for p in procs:
        try:
            _out, err = p.communicate(timeout=max(LIMIT - (time.perf_counter() - start), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            failed = f"over {LIMIT} s"
            continue
        if p.returncode and not failed:
            failed = err.decode()[-300:]
    return {"wall": time.perf_counter() - start, "failed": failed}


def cpu_of(paths: list[str]) -> dict:
    """As load(), with the CPU time taken from the children's resource usage."""
    before = os.times()
    out = load(paths)
    after = os.times()
    out["user"] = after.children_user - before.children_user
    out["sys"] = after.children_system - before.children_system
    return out


def main() -> None:
    sizes = [int(s) for s in os.environ.get("TC_CLASSES", "12500,25000,50000").split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="pl-cbtc-") as tmp, namespaces(NS):
        for total in sizes:
            per = total // len(DEVS)
            for layout, root, queues, parallel, largest in LAYOUTS:
                if total > largest:
                    continue
                texts = [batch(dev, root, per, queues) for dev in DEVS]
                if parallel:
                    paths = []
                    for dev, text in zip(DEVS, texts, strict=True):
                        path = os.path.join(tmp, f"{dev}.tc")
                        with open(path, "w") as f:
                            f.write(text)
                        paths.append(path)
                else:
                    paths = [os.path.join(tmp, "all.tc")]
                    with open(paths[0], "w") as f:
                        f.write("".join(texts))
                links(queues)
                r = cpu_of(paths)
                r.update(layout=layout, classes=total)
                # The same classes loaded again onto the tree just built: what a full load costs
                # when it keeps the tree (class replace of existing classes) instead of
                # rebuilding it through pfifo.
                again = os.path.join(tmp, "again.tc")
                with open(again, "w") as f:
                    f.writelines(
                        line
                        for text in texts
                        for line in text.splitlines(True)
                        if line.startswith("class replace")
                        and " classid " in line
                        and not line.split(" classid ")[1].split()[0].endswith(":2")
                    )
                r["again"] = cpu_of([again])
                results.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)  # noqa: T201
    print(json.dumps({"results": results}))  # noqa: T201


if __name__ == "__main__":
    main()
