"""IR -> text: the `nft -f` transaction, the `tc -batch` shaping set-up, metadata and hash.

The nft text replaces the portal's own tables atomically: for each table it declares the
table (so the delete cannot fail on a fresh host), deletes it, and defines it in full, all in one
file, hence one transaction (`flush table` would not empty sets). No other table is named.

The rule set carries no version marker: the content hash (sha256 over the nft text, a NUL and
the tc batch) names a compile, and the host's helper keeps the version it applied in its own
state (an element in the table cost every increment a delete and an add, most of its time).
Equal input gives a byte-identical text and an equal hash.

Shaping layouts (`Host.shaping_root`), both classified by `meta priority set ... map` in the
nft chains `shape_down` / `shape_up` (from `postrouting`), so there is no tc filter and no fixed-size classifier hash at all: HTB picks
the leaf straight from skb->priority (major:minor must name a class of that HTB).

* ``htb`` (default): ``root handle 1: htb default 2``; class 1:2 carries unshaped traffic at the
  link rate; each shaped member gets class 1:<minor>, minor = 0x10 + member id - 1 (stable).
  Exact, but every packet of the interface takes the one root qdisc lock.
* ``mq`` with ``tx_queues = N``: ``root handle 1: mq`` and one ``htb`` per hardware queue
  (handle 0x100+q, skipping the majors `shaping.queue_majors` names; parent 1:q+1), each with its own default class. A member lives in the HTB of
  queue ``member_id % N`` and its priority names that major, so N cores enqueue in parallel and
  each tree holds 1/N of the classes (faster to load). Caveat: HTB only honours the priority when
  the packet is transmitted on that queue; the kernel picks the tx queue by flow hash (or XPS), so
  production use needs the queue selection aligned with the member's queue (e.g. mqprio/skbedit
  queue_mapping on NICs that offer it, not available in this lab). Otherwise a packet sent on
  another queue lands in that queue's default class (unshaped). The lab tests only check that
  the mq layout loads; the single HTB root is what the packet tests prove.

Before the tree is built, the root is replaced by a pfifo: replacing an HTB root by an HTB keeps
its classes, so passing through pfifo is what makes the full batch a clean replacement. The text
stays a batch that builds the whole tree from anything (``tc -batch`` of it alone, or an agent
before issue 26, gets the right tree), but the host agent reads it as the tree a device should
run and keeps what runs when the layout (the qdiscs from the root to the HTBs) is the same:
deleting the gone classes and replacing the others instead of making every class again
(deploy/firewall/portal_fw/tctree.py; a fresh class costs a walk over every filter block of the
host, so a fresh tree is O(n^2)). The order of the classes in the text is the compiler's; for a
fresh build it does not matter (docs/ruleset.md, "Shaping classes").
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

from workers.ruleset.ir import HtbClass, Ruleset, SetDef, Shaper
from workers.ruleset.shaping import queue_majors
from workers.ruleset.values import ShapingRoot

PFIFO_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Compiled:
    """The result of a compile: texts, counts per set/map, content hash and the IR."""

    nft: str
    tc: str
    content_hash: str
    counts: dict[str, int]
    ruleset: Ruleset = field(repr=False, compare=False)

    @property
    def size(self) -> int:
        """Size of the nft text in bytes (ASCII)."""
        return len(self.nft)


def _set_text(s: SetDef, out: list[str]) -> None:
    out.append(f"\t{s.kind} {s.name} {{\n")
    vt = f" : {s.value_type}" if s.value_type else ""
    out.append(f"\t\ttype {s.key_type}{vt}\n")
    if s.flags:
        out.append(f"\t\tflags {', '.join(s.flags)}\n")
    if s.size is not None:
        out.append(f"\t\tsize {s.size}\n")
    out.extend(f"\t\t{line}\n" for line in s.extra)
    elements = s.elements
    if len(elements) == 1:
        out.append(f"\t\telements = {{ {elements[0]} }}\n")
    elif elements:
        out.append("\t\telements = {\n\t\t\t")
        out.append(",\n\t\t\t".join(elements))
        out.append("\n\t\t}\n")
    out.append("\t}\n")


def render_nft(ruleset: Ruleset) -> str:
    """The nft transaction that replaces the portal's tables (see the module docstring)."""
    out = [f"# portal rule set for host {ruleset.host}; generated, do not edit\n"]
    for t in ruleset.tables:
        out.append(f"table {t.family} {t.name} {{}}\ndelete table {t.family} {t.name}\n")
        out.append(f"table {t.family} {t.name} {{\n")
        for s in t.sets:
            _set_text(s, out)
        for ft in t.flowtables:  # before the chains whose `flow add` names it
            devices = ", ".join(f'"{d}"' for d in ft.devices)
            out.append(f"\tflowtable {ft.name} {{\n\t\thook ingress priority {ft.priority}\n")
            out.append(f"\t\tdevices = {{ {devices} }}\n")
            if ft.counter:
                out.append("\t\tcounter\n")
            out.append("\t}\n")
        for c in t.chains:
            out.append(f"\tchain {c.name} {{\n")
            if c.hook:
                out.append(
                    f"\t\ttype {c.type} hook {c.hook} priority {c.priority}; policy {c.policy};\n"
                )
            out.extend(f"\t\t{r}\n" for r in c.rules)
            out.append("\t}\n")
        out.append("}\n")
    return "".join(out)


def _quantum(kbit: int) -> int:
    # HTB's default quantum (rate / r2q) warns outside 1..200000 bytes; keep it in range and explicit.
    return min(max(kbit * 1000 // 8 // 10, 1514), 200000)


def _burst(kbit: int) -> int:
    # One millisecond at the rate, at least one full frame; tc's own default overflows at 10 Gbit/s.
    return max(kbit // 8, 1600)


@functools.lru_cache(maxsize=4096)  # members share a handful of profiles
def _htb_params(kbit: int, ceil_kbit: int) -> str:
    burst = _burst(kbit)
    cburst = _burst(ceil_kbit)
    return f"rate {kbit}kbit ceil {ceil_kbit}kbit burst {burst} cburst {cburst} quantum {_quantum(kbit)}"


def class_line(verb: str, dev: str, c: HtbClass) -> str:
    """One `tc class` batch line for a member class (verb: replace or del)."""
    if verb == "del":
        return f"class del dev {dev} classid {c.classid}\n"
    return (
        f"class {verb} dev {dev} parent {c.major:x}: classid {c.classid} htb "
        f"{_htb_params(c.rate_kbit, c.ceil_kbit)}\n"
    )


def shaper_roots(sh: Shaper) -> list[str]:
    """Root qdisc(s) and default classes of one interface."""
    dev = sh.dev
    link = sh.link_kbit
    out = [
        # A root replaced by the same kind keeps its classes; passing through pfifo drops the tree.
        f"qdisc replace dev {dev} root pfifo limit {PFIFO_LIMIT}\n",
    ]
    if sh.root is ShapingRoot.HTB:
        majors = [0x1]
        out.append(f"qdisc replace dev {dev} root handle 1: htb default {0x2:x}\n")
    else:
        majors = list(queue_majors(sh.queues))
        out.append(f"qdisc replace dev {dev} root handle 1: mq\n")
        out.extend(
            f"qdisc replace dev {dev} parent 1:{q + 1:x} handle {major:x}: htb default {0x2:x}\n"
            for q, major in enumerate(majors)
        )
    out.extend(
        f"class replace dev {dev} parent {major:x}: classid {major:x}:2 htb "
        f"{_htb_params(link, link)}\n"
        for major in majors
    )
    return out


def render_tc(ruleset: Ruleset) -> str:
    """The full `tc -batch` text: roots, default classes, one class per shaped member."""
    out: list[str] = []
    for sh in ruleset.shapers:
        out.extend(shaper_roots(sh))
        out.extend(class_line("replace", sh.dev, c) for c in sh.classes)
    return "".join(out)


def counts(ruleset: Ruleset) -> dict[str, int]:
    """Element counts per set/map (``table.set``), rules and classes."""
    result: dict[str, int] = {}
    for t in ruleset.tables:
        for s in t.sets:
            result[f"{t.name}.{s.name}"] = len(s.elements)
        result[f"{t.name}.rules"] = sum(len(c.rules) for c in t.chains)
    result["htb.classes"] = sum(len(s.classes) for s in ruleset.shapers)
    return result


def render(ruleset: Ruleset) -> Compiled:
    """Render the IR: byte-identical for equal input, hash over nft text and tc batch."""
    nft = render_nft(ruleset)
    tc = render_tc(ruleset)
    digest = hashlib.sha256()
    digest.update(nft.encode())
    digest.update(b"\0")
    digest.update(tc.encode())
    content_hash = digest.hexdigest()
    return Compiled(nft, tc, content_hash, counts(ruleset), ruleset)
