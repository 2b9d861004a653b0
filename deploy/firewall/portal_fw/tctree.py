"""A full tc load that keeps the tree: the batch that takes a device from what runs to a tree.

Creating an HTB class costs a walk over every filter block of the host (each class gets a
block, and on a device without its own tc offload (`ndo_setup_tc`: veth, most virtual devices)
binding it walks one list that holds every block of the host), so a fresh tree of n classes
costs O(n^2): 12 s for 50,000 classes in the lab. Replacing a class that exists creates no
block. So a full load (the compiler's whole tree, mode ``replace``) is planned per device
against what the kernel runs now (``tc qdisc/class/filter show``, never the agent's record, so
that a drift repair also removes what was added by hand):

* **kept** when the device runs the same layout: the same qdiscs from the root down to the
  HTBs (kind, handle, parent, HTB ``default``). The batch then removes what a fresh load would
  not have: the filters on the layout's qdiscs (a filter pointing at a class keeps it from
  being deleted, "HTB class in use"), the leaf qdiscs attached to classes that stay, the
  classes that are gone (children first; a class whose parent changed is deleted and made
  again), then replaces every class of the tree (the layout's qdiscs, equal in every option
  the text sets, stay as they are; rates and ceils of
  classes that did not change are replaced too: a hand change is repaired, and replacing is
  cheap: 1.5 s for 50,000).
* **built** otherwise (first load after a boot, another root kind, other queues, a text this
  planner does not model, e.g. filters): through a pfifo root (replacing an HTB root by an HTB
  keeps its classes; passing through pfifo drops the tree), then the tree.

**The order the classes are made in** is chosen for the day the tree goes (a layout change, a
device that loses its shaping, a restore through pfifo): the host-wide list of blocks is newest
first, and the kernel tears an mq tree down queue by queue (mq's children in queue order, each
HTB's classes in its hash order), each class looking its block up from the head of that list.
A tree made in the compiler's order (queue after queue, interleaved) made each lookup walk about
half the list: 9.9 s to drop 50,000 classes (mq64, lab). So the batch makes the classes grouped
by their HTB, the HTB of the last queue first (`creation_order`: its classes sit deepest), and a
plan drops the devices it builds anew before building any, the last built first: a teardown then
walks about its own HTB's classes. Building costs the same in any order (see
docs/ruleset.md, "Shaping classes").

The result equals a fresh load's: the same qdiscs, classes (rates, ceils, parents), default
leaf qdiscs and no filters (lab test: ``tests/e2e/lab/test_tc_keep.py``). Filters attached to a
class's own block (not to a qdisc of the layout) are not read: HTB consults a leaf class's block
never, and the compiler's trees are flat.

A text is read as the sequence tc would apply (a full tree, then increments appended to it in
``tc.current``): ``class replace/add/change`` sets a class, ``class del`` removes it, a root
``pfifo`` or ``qdisc del ... root`` starts the device anew.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .common import failed, run

PFIFO_LIMIT = 1000
ROOT = "root"
INGRESS_PARENT = (0xFFFF, 0xFFF1)  # ingress and clsact hang here, beside the root tree


def handle(text: str) -> tuple[int, int]:
    """A tc handle ``maj:min`` (hex, either part may be empty) as two integers."""
    major, _, minor = text.partition(":")
    return int(major or "0", 16), int(minor or "0", 16)


def show(h: tuple[int, int]) -> str:
    return f"{h[0]:x}:{h[1]:x}" if h[1] else f"{h[0]:x}:"


@dataclass
class Qdisc:
    """A qdisc of the layout: where it hangs, its handle, kind and HTB default class."""

    parent: tuple[int, int] | str  # ROOT or a class handle
    handle: tuple[int, int]
    kind: str
    default: int = 0
    line: str = ""

    @property
    def key(self) -> tuple[object, ...]:
        return (self.parent, self.handle, self.kind, self.default)


@dataclass
class Tree:
    """The tree one device should run, as a batch builds it."""

    qdiscs: dict[tuple[int, int], Qdisc] = field(default_factory=dict)  # by handle
    classes: dict[tuple[int, int], tuple[tuple[int, int] | str, str]] = field(
        default_factory=dict
    )  # classid -> (parent (ROOT: the qdisc itself), the replace line)
    modelled: bool = True  # False: a line the planner does not model (filters, leaf qdiscs)
    lines: list[str] = field(default_factory=list)  # the device's own lines, in order


def _words_after(words: list[str], word: str) -> str | None:
    try:
        return words[words.index(word) + 1]
    except (ValueError, IndexError):
        return None


def parse(text: str | None) -> dict[str, Tree]:
    """The tree of every device a batch names, read as tc would apply it line by line."""
    trees: dict[str, Tree] = {}
    for raw in (text or "").splitlines():
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        dev = _words_after(words, "dev")
        if dev is None:
            continue
        tree = trees.setdefault(dev, Tree())
        tree.lines.append(raw.strip() + "\n")
        verb = words[1] if len(words) > 1 else ""
        if words[0] == "qdisc":
            _parse_qdisc(tree, words, verb)
        elif words[0] == "class" and verb in {"del", "delete"}:
            classid = _words_after(words, "classid")
            if classid:
                tree.classes.pop(handle(classid), None)
        elif words[0] == "class" and verb in {"add", "replace", "change"}:
            classid, parent = _words_after(words, "classid"), _words_after(words, "parent")
            if not classid or not parent or words[words.index(classid) + 1 :][:1] != ["htb"]:
                tree.modelled = False
                continue
            cid, par = handle(classid), handle(parent)
            words[1] = "replace"
            tree.classes[cid] = (ROOT if par[1] == 0 else par, " ".join(words) + "\n")
        else:
            tree.modelled = False  # filters and anything else: built, not planned
    return trees


def _parse_qdisc(tree: Tree, words: list[str], verb: str) -> None:
    is_root = ROOT in words
    if verb in {"del", "delete"}:
        if is_root:
            tree.qdiscs.clear()
            tree.classes.clear()
        else:
            tree.modelled = False
        return
    kind, i = "", 2
    while i < len(words):  # the kind: the first word that is not dev/handle/parent X or root
        if words[i] in {"dev", "handle", "parent"}:
            i += 2
        elif words[i] == ROOT:
            i += 1
        else:
            kind = words[i]
            break
    if is_root and kind == "pfifo":  # the compiler's old way through pfifo: a new tree
        tree.qdiscs.clear()
        tree.classes.clear()
        return
    h, parent = _words_after(words, "handle"), _words_after(words, "parent")
    if not h or kind not in {"htb", "mq"} or (not is_root and not parent):
        tree.modelled = False
        return
    par: tuple[int, int] | str = ROOT if is_root else handle(parent or "")
    if is_root:
        tree.qdiscs.clear()
        tree.classes.clear()
    default = _words_after(words, "default") if kind == "htb" else None
    known = {"qdisc", verb, "dev", _words_after(words, "dev"), ROOT, "handle", h, "parent"}
    known |= {parent, kind}
    if [w for w in words if w not in known] != (["default", default] if default else []):
        tree.modelled = False  # an option the layout comparison does not read: built
        return
    q = Qdisc(par, handle(h), kind, int(default, 16) if default else 0, " ".join(words) + "\n")
    tree.qdiscs[q.handle] = q


# ---- what runs -----------------------------------------------------------------------------

QDISC_LINE = re.compile(r"qdisc (\S+) ([0-9a-f]+:) (root|parent ([0-9a-f]+:[0-9a-f]*))")
CLASS_LINE = re.compile(r"class htb ([0-9a-f]+:[0-9a-f]+) (root|parent ([0-9a-f]+:[0-9a-f]*))")


@dataclass
class Running:
    """What one device runs: its qdiscs (the layout and leaf qdiscs) and its HTB classes."""

    qdiscs: list[Qdisc]
    classes: dict[tuple[int, int], tuple[int, int] | str]  # classid -> parent (ROOT: qdisc)
    filters: dict[tuple[int, int], set[int]]  # qdisc handle -> chains holding filters


def _tc(argv: list[str], stdin: str | None = None) -> str:
    result = run(["tc", *argv], stdin=stdin, timeout=120)
    if result.returncode != 0:
        raise failed(f"tc {' '.join(argv[:2])} failed", (result.stderr or result.stdout).strip(),
                     artefact="tc")  # fmt: skip
    return result.stdout


def read_running(dev: str) -> Running:
    """``tc qdisc show``, ``tc class show`` and the filters of each HTB qdisc of one device
    (three tc processes; 25,000 classes read and parsed in ~0.1 s)."""
    qdiscs = []
    for line in _tc(["qdisc", "show", "dev", dev]).splitlines():
        m = QDISC_LINE.match(line)
        if not m:
            continue
        h = handle(m.group(2))
        parent: tuple[int, int] | str = ROOT if m.group(3) == ROOT else handle(m.group(4))
        if h == (0, 0) or parent == INGRESS_PARENT:
            continue  # default qdiscs (mq's children) and ingress/clsact: not of the tree
        words = line.split()
        default = _words_after(words, "default")
        qdiscs.append(Qdisc(parent, h, m.group(1), int(default, 16) if default else 0))
    classes: dict[tuple[int, int], tuple[int, int] | str] = {}
    for line in _tc(["class", "show", "dev", dev]).splitlines():
        m = CLASS_LINE.match(line)
        if m:
            classes[handle(m.group(1))] = ROOT if m.group(2) == ROOT else handle(m.group(3))
    filters: dict[tuple[int, int], set[int]] = {}
    htbs = [q.handle for q in qdiscs if q.kind == "htb"]
    if htbs:  # one batch; a qdisc without filters prints nothing
        out = _tc(
            ["-batch", "-"], "".join(f"filter show dev {dev} parent {show(h)}\n" for h in htbs)
        )
        # The output does not name the parent: ask again one by one only when there are any.
        if out.strip():
            for h in htbs:
                text = _tc(["filter", "show", "dev", dev, "parent", show(h)])
                chains = {int(c) for c in re.findall(r"\bchain (\d+)", text)}
                if text.strip():
                    filters[h] = chains or {0}
    return Running(qdiscs, classes, filters)


# ---- the plan ------------------------------------------------------------------------------


def layout_of(tree: Tree) -> set[tuple[object, ...]]:
    return {q.key for q in tree.qdiscs.values()}


def running_layout(running: Running) -> tuple[set[tuple[object, ...]], list[Qdisc]]:
    """The running qdiscs of the tree (from the root to the HTBs) and the leaf qdiscs hanging
    from HTB classes."""
    htb = {q.handle[0] for q in running.qdiscs if q.kind == "htb"}
    layout, leaves = set(), []
    for q in running.qdiscs:
        if q.parent != ROOT and isinstance(q.parent, tuple) and q.parent[0] in htb:
            leaves.append(q)
        else:
            layout.add(q.key)
    return layout, leaves


def build_lines(dev: str, tree: Tree) -> list[str]:
    """The batch of a fresh tree: through pfifo, then the layout and the classes."""
    out = [f"qdisc replace dev {dev} root pfifo limit {PFIFO_LIMIT}\n"]
    if not tree.modelled:
        return out + tree.lines
    out += _layout_lines(tree)
    out += creation_order(tree)
    return out


def creation_order(tree: Tree) -> list[str]:
    """The class lines of `tree` grouped by their HTB qdisc, the HTB under the highest mq
    class (the last queue) first, each group in the text's order (parents before children):
    the reverse of the order in which the kernel tears the tree down (module docstring)."""
    queue = {
        h[0]: q.parent[1]
        for h, q in tree.qdiscs.items()
        if q.kind == "htb" and isinstance(q.parent, tuple)
    }
    ordered = sorted(tree.classes.items(), key=lambda item: -queue.get(item[0][0], 0))
    return [line for _cid, (_parent, line) in ordered]


def _layout_lines(tree: Tree) -> list[str]:
    ordered = sorted(tree.qdiscs.values(), key=lambda q: q.parent != ROOT)  # the root first
    return [q.line for q in ordered]


def keep_lines(dev: str, tree: Tree, running: Running) -> tuple[list[str], list[str]]:
    """The batch that turns the running tree (same layout) into `tree` without making any
    class that exists again, in two phases: what runs before the rule set that names the new
    classes (filters and leaf qdiscs dropped, every class of the tree replaced: the new ones
    made) and what runs after the rule set that stops naming the old ones (the classes that
    are gone, children first). A class whose parent changed is deleted and made again in the
    first phase (and then every gone class goes there as well, children first)."""
    _layout, leaves = running_layout(running)
    before = [
        f"filter del dev {dev} parent {show(h)}" + (f" chain {c}" if c else "") + "\n"
        for h, chains in sorted(running.filters.items())
        for c in sorted(chains)
    ]
    gone = {
        cid
        for cid, parent in running.classes.items()
        if cid not in tree.classes or tree.classes[cid][0] != parent
    }
    before += [
        f"qdisc del dev {dev} parent {show(q.parent)}\n"  # type: ignore[arg-type]
        for q in leaves
        if q.parent not in gone
    ]

    def depth(cid: tuple[int, int]) -> int:
        n, parent = 0, running.classes.get(cid)
        while isinstance(parent, tuple) and n < 8:
            n, parent = n + 1, running.classes.get(parent)
        return n

    deletes = [
        f"class del dev {dev} classid {show(cid)}\n"
        for cid in sorted(gone, key=lambda c: (-depth(c), c))
    ]
    # The layout's qdiscs stay as they are: equal in every option the text sets (neither mq nor
    # htb can be changed in place: "Change operation not supported").
    replaces = creation_order(tree)  # new classes are made in the same order as a fresh build's
    if gone & tree.classes.keys():  # a class made again under another parent: deletes first
        return before + deletes + replaces, []
    return before + replaces, deletes


@dataclass
class Plan:
    """The batch of a full load for every device, in two phases (`keep_lines`): `before` the
    rule set is loaded (classes made and changed, devices built anew) and `after` it (classes
    gone); and which devices keep their tree."""

    before: str
    after: str
    kept: list[str]
    built: list[str]

    @property
    def text(self) -> str:
        return self.before + self.after


def plan(text: str) -> Plan:
    """The batch of a full load (see the module docstring), one device after the other."""
    parts: list[tuple[str, list[str]]] = []
    after: list[str] = []
    kept, built = [], []
    for dev, tree in sorted(parse(text).items()):
        running = read_running(dev) if tree.modelled and tree.qdiscs else None
        if running is not None and running_layout(running)[0] == layout_of(tree):
            first, last = keep_lines(dev, tree, running)
            parts.append((dev, first))
            after += last
            kept.append(dev)
        else:
            parts.append((dev, build_lines(dev, tree)))
            built.append(dev)
    return Plan(assemble(parts, built), "".join(after), kept, built)


def assemble(parts: list[tuple[str, list[str]]], built: list[str]) -> str:
    """One batch of the devices' parts, in their order, except that the devices built anew
    are first all dropped to pfifo (the first line of a build), the last of them first: each
    old tree then goes while its blocks are the newest of the host (module docstring)."""
    drops = [lines[0] for dev, lines in reversed(parts) if dev in built]
    rest = [line for dev, lines in parts for line in (lines[1:] if dev in built else lines)]
    return "".join(drops + rest)
