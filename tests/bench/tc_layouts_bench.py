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
(`class replace` of classes that exist), and the next compile's tree (5 % of the members gone,
5 % new, 5 % with another profile) loaded the way the host agent loads a full tree
(`tests.bench.tc_keep_load`: portal_fw.tc.apply, which keeps the tree when the layout is the
same: docs/ruleset.md "Shaping classes"). No filters in any: the nft `shape` chain classifies
(`meta priority set` map), so there is no tc filter to scale.

What might cut the first (fresh) build, measured beside it: the member classes added in another
order (descending, shuffled) at 25,000 classes (mq8), and 12,500 fresh classes loaded onto a
third link while 0 or 50,000 classes exist on the other two (the walk a new class pays is over
the blocks of the whole host, not of its qdisc).

At the largest size, the mq layouts also time a layout change's halves (`layout_change`): the
tree dropped to pfifo as the host agent's plan did before, the tree built anew by the host
agent, and that tree dropped as the plan does now (docs/ruleset.md, "Shaping classes").
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time

from tests.bench.ruleset_bench import _run, namespaces
from workers.ruleset.ir import HtbClass, Shaper
from workers.ruleset.render import class_line, shaper_roots
from workers.ruleset.shaping import queue_majors
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


def batch(
    dev: str, root: ShapingRoot, classes: int, queues: int, nxt: bool = False, order: str = ""
) -> str:
    """The compiler's full tree of `classes` members on `dev`; `nxt`: the next compile's (5 %
    gone, 5 % new, 5 % on another profile); `order`: the member classes descending or shuffled
    instead of the compiler's order."""
    majors = list(queue_majors(queues)) if root is ShapingRoot.MQ else [0x1]
    ids = list(range(classes))
    profile = {m: m % len(PROFILES) for m in ids}
    if nxt:
        step = 20  # every 20th member goes, every 20th (offset) changes, 5 % new ones
        ids = [m for m in ids if m % step] + list(range(classes, classes + classes // step))
        profile.update({m: (m + 1) % len(PROFILES) for m in ids if m % step == 7})
        profile.update({m: m % len(PROFILES) for m in ids if m >= classes})
    members = [HtbClass(majors[m % len(majors)], 0x10 + m, *PROFILES[profile[m]]) for m in ids]
    sh = Shaper(dev=dev, root=root, queues=queues, link_kbit=10_000_000, classes=tuple(members))
    if order == "descending":
        members.reverse()
    elif order == "shuffled":
        random.Random(26).shuffle(members)  # noqa: S311 (an order, not a secret)
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


def keep_load(tmp: str, texts: list[str]) -> dict:
    """The next compile's tree loaded the way the host agent loads a full tree."""
    path = os.path.join(tmp, "next.tc")
    with open(path, "w") as f:
        f.write("".join(texts))
    out = subprocess.run(
        ["ip", "netns", "exec", NS, sys.executable, "-m", "tests.bench.tc_keep_load", path,
         os.path.join(tmp, "agent")],
        check=False, capture_output=True, text=True, timeout=LIMIT,
    )  # fmt: skip
    if out.returncode:
        return {"wall": 0.0, "plan": 0.0, "sys": 0.0, "kept": [], "failed": out.stderr[-300:]}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "failed": ""}


def drop(tmp: str, devs: tuple[str, ...]) -> dict:
    """Every link dropped to pfifo, in the order given (what a layout change does first)."""
    path = os.path.join(tmp, "drop.tc")
    with open(path, "w") as f:
        f.writelines(f"qdisc replace dev {dev} root pfifo limit 1000\n" for dev in devs)
    return cpu_of([path])


def layout_change(tmp: str, texts: list[str]) -> dict:
    """A layout change's two halves on the tree the keep load left: the old tree dropped as
    the host agent's plan did before (link after link, a tree made in the compiler's
    interleaved order), the tree built anew by the host agent (portal_fw.tctree: classes grouped
    by HTB, the last queue's first), and that tree dropped as the plan does now (the last
    link first)."""
    before = drop(tmp, DEVS)
    built = keep_load(tmp, texts)
    return {"drop_before": before, "built": built, "drop_now": drop(tmp, DEVS[::-1])}


def first_build(tmp: str) -> list[dict]:
    """What might cut the fresh build: another order of the classes; and the same fresh load
    with and without other classes on the host."""
    results = []
    per = 12_500
    for order in ("", "descending", "shuffled"):
        path = os.path.join(tmp, "order.tc")
        with open(path, "w") as f:
            f.write("".join(batch(dev, ShapingRoot.MQ, per, 8, order=order) for dev in DEVS))
        links(8)
        r = cpu_of([path])
        r.update(kind="order", order=order or "ascending (the compiler's)", classes=2 * per)
        results.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)  # noqa: T201
    for beside in (0, 50_000):
        links(8)
        if beside:
            path = os.path.join(tmp, "beside.tc")
            with open(path, "w") as f:
                f.write("".join(batch(d, ShapingRoot.MQ, beside // 2, 64) for d in DEVS))
            links(64)
            load([path])
        _run("ip", "link", "del", "third0", ns=NS, check=False)
        _run("ip", "link", "add", "third0", "numtxqueues", "8", "type", "veth", "peer", "name",
             "pl-pthird0", "numtxqueues", "8", ns=NS)  # fmt: skip
        path = os.path.join(tmp, "third.tc")
        with open(path, "w") as f:
            f.write(batch("third0", ShapingRoot.MQ, per, 8))
        r = cpu_of([path])
        r.update(kind="beside", beside=beside, classes=per)
        results.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)  # noqa: T201
        _run("ip", "link", "del", "third0", ns=NS, check=False)
    return results


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
                if not parallel:
                    r["keep"] = keep_load(
                        tmp, [batch(dev, root, per, queues, nxt=True) for dev in DEVS]
                    )
                if not parallel and total == max(sizes) and root is ShapingRoot.MQ:
                    r.update(layout_change(tmp, texts))
                results.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)  # noqa: T201
        if os.environ.get("TC_FIRST_BUILD", "1") == "1":
            results += first_build(tmp)
    print(json.dumps({"results": results}))  # noqa: T201


if __name__ == "__main__":
    main()
