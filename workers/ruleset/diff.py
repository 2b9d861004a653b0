"""The minimal incremental transaction between two compiles of the same host.

When the structure (tables, chains, set definitions, shaper roots) is unchanged, the difference
is a list of element deletions and additions plus HTB class changes; otherwise `diff` returns
None and the caller applies the full replacement. Deletions come before additions, so a key whose
value changed (a forward to another device, a member moved to another class) is deleted and
re-added in the same transaction. The rule set holds no version marker (see `render`), so an
increment touches only what changed; a host that applied it holds the same kernel state as one
that loaded the full text, and its helper records `new_hash` as the version it runs.

Apply order on the host: the tc batch, then the nft transaction (a class must exist before the
priority map points at it; until then packets fall into the default class, which is harmless).

From stored data: `diff_stored(previous.to_json(), previous_hash, new)` recompiles the stored
snapshot and diffs; it answers None (full replacement) when the recompile does not reproduce
the stored hash, i.e. when the compiler changed in between. A hash set that would outgrow its
declared `size` changes the structure, so it also gets the full replacement. On a host with
the fast path, removals and newly shaped members get it too (see FAST_PATH_REPLACED_ON_ADD).
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.ruleset.build import build
from workers.ruleset.ir import ELEMENT_SEP, Ruleset
from workers.ruleset.render import Compiled, class_line, render
from workers.ruleset.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Incremental:
    """An element-only update from `old_hash` to `new_hash`."""

    nft: str
    tc: str
    old_hash: str
    new_hash: str
    added: int
    deleted: int
    classes_changed: int

    @property
    def empty(self) -> bool:
        """True when no element and no class changes (only the version moves)."""
        return not (self.added or self.deleted or self.classes_changed)


# With the fast path (a flowtable in the table), an offloaded flow never meets the chains again
# while it stays in the flowtable: an increment that takes something away (a forward, an
# opening, a device's addresses) or shapes a member would not reach the flows already
# offloaded. The full replacement deletes and recreates the flowtable in its transaction, which
# sends every flow back to the classic path, where the new rules decide on its next packet.
FAST_PATH_REPLACED_ON_ADD = frozenset({"shaped4", "shaped6", "shaped6_net"})


def _key(element: str) -> str:
    return element.split(ELEMENT_SEP, 1)[0]


def diff_rulesets(old: Ruleset, new: Ruleset, old_hash: str, new_hash: str) -> Incremental | None:
    """Element and class changes from `old` to `new`, or None when the structure differs."""
    if old.host != new.host or old.structure() != new.structure():
        return None
    deletes: list[str] = []
    adds: list[str] = []
    n_add = n_del = 0
    # The flowtable sits in the filter table, but an offloaded flow carries its NAT too: a
    # removal in any table (a forward of the NAT table) needs the replacement.
    fast_path = any(t.flowtables for t in new.tables)
    for ot, nt in zip(old.tables, new.tables, strict=True):
        prefix = f"{nt.family} {nt.name}"
        for os_, ns in zip(ot.sets, nt.sets, strict=True):
            if os_.elements == ns.elements:
                continue
            before = set(os_.elements)
            after = set(ns.elements)
            gone = sorted(before - after)
            came = sorted(after - before)
            if fast_path and (gone or (came and ns.name in FAST_PATH_REPLACED_ON_ADD)):
                return None  # an offloaded flow meets the new rules only after a replacement
            if gone:
                keys = ", ".join(_key(e) for e in gone) if ns.value_type else ", ".join(gone)
                deletes.append(f"delete element {prefix} {ns.name} {{ {keys} }}\n")
            if came:
                adds.append(f"add element {prefix} {ns.name} {{ {', '.join(came)} }}\n")
            n_add += len(came)
            n_del += len(gone)
    tc: list[str] = []
    classes_changed = 0
    for osh, nsh in zip(old.shapers, new.shapers, strict=True):
        if osh.classes == nsh.classes:
            continue
        before_c = {(c.major, c.minor): c for c in osh.classes}
        after_c = {(c.major, c.minor): c for c in nsh.classes}
        for key in sorted(before_c.keys() - after_c.keys()):
            tc.append(class_line("del", nsh.dev, before_c[key]))
            classes_changed += 1
        for key in sorted(after_c):
            if before_c.get(key) != after_c[key]:
                tc.append(class_line("replace", nsh.dev, after_c[key]))
                classes_changed += 1
    header = f"# portal increment for host {new.host}: {old_hash} -> {new_hash}\n"
    return Incremental(
        header + "".join(deletes) + "".join(adds),
        "".join(tc),
        old_hash,
        new_hash,
        n_add,
        n_del,
        classes_changed,
    )


def diff(old: Compiled, new: Compiled) -> Incremental | None:
    """The incremental transaction from compile `old` to compile `new`; None: use `new` in full."""
    return diff_rulesets(old.ruleset, new.ruleset, old.content_hash, new.content_hash)


def diff_stored(
    previous_snapshot_json: str | bytes, previous_hash: str, new: Compiled
) -> Incremental | None:
    """The increment from a stored version (its `Snapshot.to_json()` and content hash) to `new`.

    The previous snapshot is compiled again; when that does not reproduce `previous_hash` (the
    compiler changed since the previous version was stored) there is no safe base and the
    answer is None: apply `new` in full.
    """
    old = render(build(Snapshot.from_json(previous_snapshot_json)))
    if old.content_hash != previous_hash:
        return None
    return diff(old, new)
