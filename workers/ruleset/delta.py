"""Delta compile: the increment of a few changed members, from their typed values alone.

A full compile (`build` + `render`) reads every member and renders the whole rule set; its
cost grows with the site. A change names its members, and every per-member element of the rule
set (`sets.member_sets`) and every HTB class (`shaping.shapers`) is a function of that member
alone plus three things of the site: which /64s several members share, the member's HTB minor
(its id, unless ids wrap above 0xffe0), and the sizes of the hash sets. `DeltaBase` keeps, per
host, what the last full compile (plus the increments since) made of each member: its elements
per set, its classes, the owners of each /64, the element count and digest of each set. A step
(`delta_step`) then compiles only the changed members and answers the same element and class
changes `diff_rulesets(full_before, full_after)` would, byte for byte (nft text and tc lines),
or None with the reason when the increment cannot express the change:

* a member's /64 becomes or stops being shared: the other owners' elements are recompiled too
  (their typed values are in the base), so this is still a delta;
* a hash set would change its declared size (`capacity`), a shaped member whose HTB minor
  depends on others (ids above the minor space), a removal or a newly shaped member on a host
  with the fast path (`diff.FAST_PATH_REPLACED_ON_ADD`), a uniqueness clash across members:
  None, the caller compiles in full;
* anything that is not a member (policy, host, sites, shaping layout, DHCP): the caller never
  asks; the full compile is the one source of truth and builds a fresh base.

The base is changed in place by a successful step: it describes what the host runs once it
applied the increment. A refused increment, a failed push or any doubt: drop the base and
compile in full (`DeltaBase.from_ruleset`).

Identity without rendering: `content_digest(ruleset)` is sha256 over the rule set's structure
(`Ruleset.structure()`), and per set and per shaper an order-independent multiset digest (the
sum of sha256 of each element / class line mod 2**256, and the count; the host agent's digest
uses the same construction over what the kernel holds). A step moves the sums by the elements
it adds and removes, so `DeltaBase.digest` after any sequence of steps equals
`content_digest` of a fresh full compile of the same members; the equivalence tests check
exactly that. Computing it for a full compile costs one sha256 per element (a full compile's
business, off the path of a change).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from workers.ruleset.checks import _Owners
from workers.ruleset.diff import FAST_PATH_REPLACED_ON_ADD, Incremental
from workers.ruleset.ir import ELEMENT_SEP, HtbClass, Ruleset
from workers.ruleset.member import Member
from workers.ruleset.memo import MEMO, Entries
from workers.ruleset.render import class_line
from workers.ruleset.sets import (
    ACCT4,
    FWD_BOTH,
    FWD_RANGES,
    FWD_TCP,
    FWD_UDP,
    NOPUB4,
    OPEN_ALL,
    OPEN_PORTS,
    OPEN_RANGES,
    SHAPE4,
    SHAPE6,
    SHAPE6_NET,
    SRC6,
    SRC6_NET,
    SRC_NAT,
    SYN4,
    _member_elements,
)
from workers.ruleset.shaping import (
    FIRST_MEMBER_MINOR,
    HTB_ROOT_MAJOR,
    MINOR_SPACE,
    class_minors,
    queue_major,
)
from workers.ruleset.snapshot import Snapshot
from workers.ruleset.spelling import capacity
from workers.ruleset.values import ShapingRoot, SnapshotError

MOD256 = 1 << 256

# Per-member part index -> the sets its elements go to, and how ("el": as they are, "key": the
# key of a map element). Derived sets (the accounting pairs, the fast path's key sets) are
# filled from the same parts, as `member_sets` fills them.
_PLAIN = {
    FWD_TCP: ("fwd_tcp",),
    FWD_UDP: ("fwd_udp",),
    FWD_BOTH: ("fwd_both",),
    FWD_RANGES: ("fwd_ranges",),
    NOPUB4: ("nopub4",),
    OPEN_ALL: ("open6_all",),
    OPEN_PORTS: ("open6_ports",),
    OPEN_RANGES: ("open6_ranges",),
    SHAPE4: ("shape4",),
    SHAPE6: ("shape6",),
    SHAPE6_NET: ("shape6_net",),
    SRC6: ("acct6_in", "acct6_out"),
    SRC6_NET: ("acct6n_in", "acct6n_out"),
    SRC_NAT: ("src_nat",),
    ACCT4: ("acct4_in", "acct4_out"),
}
_SHAPED = {SHAPE4: "shaped4", SHAPE6: "shaped6", SHAPE6_NET: "shaped6_net"}

Named = dict[str, tuple[str, ...]]  # set name -> one member's elements in it


def _key(element: str) -> str:
    return element.split(ELEMENT_SEP, 1)[0]


def named_elements(
    parts: Iterable[tuple[int, tuple[str, ...]]], *, syn: bool, fast_path: bool
) -> Named:
    """One member's elements per set name, from its `_member_elements` parts."""
    out: dict[str, list[str]] = {}
    tcp: list[str] = []
    udp: list[str] = []
    for index, elements in parts:
        if index == SYN4:
            if syn:
                out.setdefault("syn_fwd4", []).extend(elements)
            continue
        for name in _PLAIN[index]:
            out.setdefault(name, []).extend(elements)
        if not fast_path:
            continue
        if index in _SHAPED:
            out.setdefault(_SHAPED[index], []).extend(_key(e) for e in elements)
        elif index in (FWD_TCP, FWD_BOTH):
            tcp.extend(_key(e) for e in elements)
            if index == FWD_BOTH:
                udp.extend(_key(e) for e in elements)
        elif index == FWD_UDP:
            udp.extend(_key(e) for e in elements)
        elif index == FWD_RANGES:
            for key in (_key(e) for e in elements):  # "address . proto . first-last"
                address, proto, ports = key.split(" . ")
                (tcp if proto == "tcp" else udp).append(f"{address} . {ports}")
    if fast_path:
        if tcp:
            out.setdefault("fwd_keys_tcp", []).extend(tcp)
        if udp:
            out.setdefault("fwd_keys_udp", []).extend(udp)
    return {name: tuple(elements) for name, elements in out.items()}


# ------------------------------------------------------------------------------------ digest


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def multiset(items: Iterable[str]) -> tuple[int, int]:
    """(sum of sha256 of each item mod 2**256, count): order-independent, updatable."""
    total = count = 0
    for item in items:
        total += _h(item)
        count += 1
    return total % MOD256, count


def _class_text(dev: str, c: HtbClass) -> str:
    return class_line("replace", dev, c)


def _digest_of(
    structure: object, sets: Mapping[str, tuple[int, int]], shapers: Mapping[str, tuple[int, int]]
) -> str:
    h = hashlib.sha256(repr(structure).encode())
    for name in sorted(sets):
        total, count = sets[name]
        h.update(f"\nset {name} {total:064x} {count}".encode())
    for dev in sorted(shapers):
        total, count = shapers[dev]
        h.update(f"\ntc {dev} {total:064x} {count}".encode())
    return h.hexdigest()


def content_digest(ruleset: Ruleset) -> str:
    """The order-independent identity of a compiled rule set (nft and tc): equal content,
    equal digest, however the elements were ordered or arrived (full compile or steps)."""
    sets = {s.name: multiset(s.elements) for t in ruleset.tables for s in t.sets}
    shapers = {
        sh.dev: multiset(_class_text(sh.dev, c) for c in sh.classes) for sh in ruleset.shapers
    }
    return _digest_of(ruleset.structure(), sets, shapers)


# -------------------------------------------------------------------------------------- base


@dataclass(slots=True)
class MemberEntry:
    """What the base holds of one member: the member, its /64s, its elements and classes."""

    member: Member
    prefixes: tuple[int, ...]
    named: Named
    classes: tuple[int, int, int, int] | None  # (major, minor, down, up) when shaped


@dataclass(slots=True)
class DeltaBase:
    """What one host runs, per member, as the last full compile and the steps since made it."""

    host_name: str
    structure: object
    where: dict[str, str]  # set name -> "family table"
    maps: frozenset[str]  # the sets that are maps (deleted by key)
    order: tuple[str, ...]  # set names in the rule set's order (diff's order)
    hashed: dict[str, int]  # hash set name -> declared size
    counts: dict[str, int]
    sums: dict[str, int]
    shaper_devs: tuple[tuple[str, bool], ...]  # (device, carries the down classes), dev order
    class_sums: dict[str, tuple[int, int]]
    entries: dict[int, MemberEntry]
    owners6: dict[int, set[int]]  # /64 (upper 64 bits) -> member ids with an address in it
    owners: _Owners
    syn: bool
    fast_path: bool
    mq: bool
    queues: int
    wrapped_shaped: int  # shaped members whose id is beyond the minor space
    digest: str = field(default="")
    recompiled: int = 0  # members the last step compiled (changed, and owners of a flipped /64)

    # ---------------------------------------------------------------------------- building
    @classmethod
    def from_ruleset(cls, snapshot: Snapshot, ruleset: Ruleset) -> DeltaBase:
        """The base of `snapshot`'s full compile `ruleset` (call right after `build`: the
        members' element entries come from the compiler's memo when it holds them)."""
        host = snapshot.host
        syn = snapshot.policy.syn_proxy
        fast = host.fast_path
        where: dict[str, str] = {}
        maps: set[str] = set()
        order: list[str] = []
        hashed: dict[str, int] = {}
        counts: dict[str, int] = {}
        sums: dict[str, int] = {}
        for t in ruleset.tables:
            for s in t.sets:
                if s.name in where:
                    raise SnapshotError(f"delta: set {s.name} in two tables")
                where[s.name] = f"{t.family} {t.name}"
                order.append(s.name)
                if s.value_type is not None:
                    maps.add(s.name)
                if s.size is not None and s.flags == () and "dynamic" not in s.flags:
                    hashed[s.name] = s.size
                counts[s.name] = len(s.elements)
                sums[s.name] = multiset(s.elements)[0]
        member_devs = set(host.member_interfaces)
        shaper_devs = tuple((sh.dev, sh.dev in member_devs) for sh in ruleset.shapers)
        class_sums = {
            sh.dev: multiset(_class_text(sh.dev, c) for c in sh.classes) for sh in ruleset.shapers
        }
        owners6: dict[int, set[int]] = {}
        for m in snapshot.members:
            for d in m.devices:
                for a in d.ipv6:
                    owners6.setdefault(a._ip >> 64, set()).add(m.id)  # type: ignore[attr-defined]
        shared = {p for p, ids in owners6.items() if len(ids) > 1}
        owners = _Owners(host)
        base = cls(
            host.name, ruleset.structure(), where, frozenset(maps), tuple(order), hashed, counts, sums,
            shaper_devs, class_sums, {}, owners6, owners, syn, fast,
            host.shaping_root is ShapingRoot.MQ, host.tx_queues, 0,
        )  # fmt: skip
        memo = MEMO.elements.get((host.name, syn))
        minors = class_minors(m.id for m in snapshot.members if m.shaping is not None)
        for m in snapshot.members:
            owners.add(m)
            base.entries[m.id] = base._entry(m, shared, minors.get(m.id), memo)
            if m.shaping is not None and m.id > MINOR_SPACE:
                base.wrapped_shaped += 1
        base._check_counts()
        base.digest = base._digest()
        return base

    def _check_counts(self) -> None:
        """Every per-member set holds exactly the members' elements (plus the fast path's
        constant "live" elements): else the compiler's layout and this module disagree."""
        per_set: dict[str, int] = {}
        for entry in self.entries.values():
            for name, elements in entry.named.items():
                per_set[name] = per_set.get(name, 0) + len(elements)
        for name, n in per_set.items():
            if name not in self.counts or self.counts[name] < n:
                raise SnapshotError(f"delta: set {name} does not hold its members' elements")

    def _digest(self) -> str:
        sets = {name: (self.sums[name], self.counts[name]) for name in self.order}
        return _digest_of(self.structure, sets, self.class_sums)

    def _entry(
        self, m: Member, shared: set[int], minor: int | None = None, memo: Entries | None = None
    ) -> MemberEntry:
        """`m`'s entry; its HTB minor is `minor` (kept from before) or its id's own. `memo`:
        the compiler's element entries of this host's last compile (`memo.MEMO.elements`),
        reused when they were made from this very member with the same class and /64s."""
        classes = None
        if m.shaping is not None:
            major = queue_major(m.id % self.queues, self.queues) if self.mq else HTB_ROOT_MAJOR
            if minor is None:
                minor = FIRST_MEMBER_MINOR + (m.id - 1) % MINOR_SPACE
            classes = (major, minor, m.shaping.down_kbit, m.shaping.up_kbit)
        classid = f"{classes[0]:x}:{classes[1]:x}" if classes else ""
        prefixes = tuple(dict.fromkeys(a._ip >> 64 for d in m.devices for a in d.ipv6))  # type: ignore[attr-defined]
        hit = memo.get(m.id) if memo is not None else None
        if (
            hit is not None
            and hit[0] is m
            and hit[1] == classid
            and hit[3] == prefixes
            and hit[2] == tuple(p in shared for p in prefixes)
        ):
            parts = hit[4]
        else:
            parts = _member_elements(m, classid, shared, self.syn)
        return MemberEntry(
            m, prefixes, named_elements(parts, syn=self.syn, fast_path=self.fast_path), classes
        )


class NotExpressible(Exception):
    """The change needs the full compile (the reason is the message)."""


def delta_step(base: DeltaBase, changed: Mapping[int, Member | None]) -> Incremental:
    """The increment for `changed` (member id -> its new typed value, None: no longer on this
    host) on top of `base`, which then describes the host after it. Raises NotExpressible
    (base unchanged) when only the full compile can express the change, SnapshotError when a
    changed member clashes with another (base unchanged)."""
    entries = base.entries
    olds = {mid: entries[mid].member for mid in changed if mid in entries}
    news = {mid: m for mid, m in changed.items() if m is not None}
    for mid, m in news.items():
        if m.id != mid:
            raise SnapshotError(f"delta: member #{m.id} given as #{mid}")
    same = {mid for mid, m in news.items() if olds.get(mid) is m}  # the very same value
    news = {mid: m for mid, m in news.items() if mid not in same}
    olds = {mid: m for mid, m in olds.items() if mid not in same}
    touched = set(olds) | set(news)
    if not touched:
        header = f"# portal increment for host {base.host_name}: {base.digest} -> {base.digest}\n"
        return Incremental(header, "", base.digest, base.digest, 0, 0, 0)
    _shaping_expressible(base, olds, news)
    # /64 owners after the change; owners of a /64 whose shared state flips are recompiled.
    flips: set[int] = set()
    owners6 = base.owners6
    delta6: dict[int, tuple[set[int], set[int]]] = {}
    for mid in touched:
        before = entries[mid].prefixes if mid in entries else ()
        after = _prefixes(news[mid]) if mid in news else ()
        for p in before:
            delta6.setdefault(p, (set(), set()))[0].add(mid)
        for p in after:
            delta6.setdefault(p, (set(), set()))[1].add(mid)
    new_owners6: dict[int, set[int]] = {}
    for p, (gone, came) in delta6.items():
        old_ids = owners6.get(p, set())
        new_ids = (old_ids - gone) | came
        new_owners6[p] = new_ids
        if (len(old_ids) > 1) != (len(new_ids) > 1):
            flips.add(p)
    recompile = set(touched)
    for p in flips:
        recompile |= new_owners6[p] | owners6.get(p, set())
    shared_after = {
        p for p in _prefix_union(base, recompile, news) if _owner_count(p, owners6, new_owners6) > 1
    }
    # Uniqueness across members, as the full compile's check (undone on a clash).
    _owners_swap(base.owners, olds, news)
    try:
        new_entries: dict[int, MemberEntry | None] = {}
        for mid in recompile:
            value: Member | None = news.get(mid) if mid in touched else entries[mid].member
            old = entries.get(mid)
            keep = old.classes[1] if old is not None and old.classes is not None else None
            new_entries[mid] = base._entry(value, shared_after, keep) if value else None
        text, tc, added, deleted, classes_changed, sums, counts, class_sums = _changes(
            base, new_entries
        )
    except (NotExpressible, SnapshotError):
        _owners_swap(base.owners, news, olds)
        raise
    old_digest = base.digest
    # Commit: the base now describes the host after the increment.
    for mid, entry in new_entries.items():
        old = entries.get(mid)
        if old is not None and old.member.shaping is not None and old.member.id > MINOR_SPACE:
            base.wrapped_shaped -= 1
        if entry is None:
            entries.pop(mid, None)
        else:
            entries[mid] = entry
            if entry.member.shaping is not None and mid > MINOR_SPACE:
                base.wrapped_shaped += 1
    for p, ids in new_owners6.items():
        if ids:
            owners6[p] = ids
        else:
            owners6.pop(p, None)
    base.sums.update(sums)
    base.counts.update(counts)
    base.class_sums.update(class_sums)
    base.digest = base._digest()
    header = f"# portal increment for host {base.host_name}: {old_digest} -> {base.digest}\n"
    base.recompiled = len(recompile)
    return Incremental(header + text, tc, old_digest, base.digest, added, deleted, classes_changed)


def _prefixes(m: Member) -> tuple[int, ...]:
    return tuple(dict.fromkeys(a._ip >> 64 for d in m.devices for a in d.ipv6))  # type: ignore[attr-defined]


def _prefix_union(base: DeltaBase, ids: set[int], news: Mapping[int, Member]) -> set[int]:
    out: set[int] = set()
    for mid in ids:
        if mid in news:
            out.update(_prefixes(news[mid]))
        elif mid in base.entries:
            out.update(base.entries[mid].prefixes)
    return out


def _owner_count(p: int, owners6: dict[int, set[int]], new_owners6: dict[int, set[int]]) -> int:
    ids = new_owners6.get(p)
    return len(ids if ids is not None else owners6.get(p, ()))


def _owners_swap(owners: _Owners, out: Mapping[int, Member], into: Mapping[int, Member]) -> None:
    """Give back the keys of `out`, take those of `into` (raises SnapshotError on a clash,
    after restoring `out`)."""
    for m in out.values():
        owners.remove(m)
    taken: list[Member] = []
    try:
        for m in into.values():
            owners.add(m)
            taken.append(m)
    except SnapshotError:
        for m in taken:
            owners.remove(m)
        _forget_partial(owners, into, taken)
        for m in out.values():
            owners.add(m)
        raise


def _forget_partial(owners: _Owners, into: Mapping[int, Member], taken: list[Member]) -> None:
    """The member whose `add` raised may have taken some keys before the clash: give back
    the keys it holds (only those it holds, never another's)."""
    done = {m.id for m in taken}
    for m in into.values():
        if m.id in done:
            continue
        if owners.by_id.get(m.id) is m:
            del owners.by_id[m.id]
        if m.public_ipv4 is not None and owners.public_ip.get(m.public_ipv4._ip) == m.id:  # type: ignore[attr-defined]
            del owners.public_ip[m.public_ipv4._ip]  # type: ignore[attr-defined]
        for d in m.devices:
            if owners.device.get(d.id) == m.id:
                del owners.device[d.id]
                if d.ipv4 is not None and owners.v4.get(d.ipv4._ip) == d.id:  # type: ignore[attr-defined]
                    del owners.v4[d.ipv4._ip]  # type: ignore[attr-defined]
                for a6 in d.ipv6:
                    if owners.v6.get(a6._ip) == d.id:  # type: ignore[attr-defined]
                        del owners.v6[a6._ip]  # type: ignore[attr-defined]
        return  # only the first one not taken can have raised


def _shaping_expressible(
    base: DeltaBase, olds: Mapping[int, Member], news: Mapping[int, Member]
) -> None:
    """HTB minors are the member id while ids stay in the minor space; beyond it a minor
    depends on every other shaped member (`shaping.class_minors` probes): full compile."""
    for mid in set(olds) | set(news):
        was = mid in olds and olds[mid].shaping is not None
        is_ = mid in news and news[mid].shaping is not None
        if was != is_ and (base.wrapped_shaped or mid > MINOR_SPACE):
            raise NotExpressible("shaped members beyond the HTB minor space")


def _changes(
    base: DeltaBase, new_entries: Mapping[int, MemberEntry | None]
) -> tuple[str, str, int, int, int, dict[str, int], dict[str, int], dict[str, tuple[int, int]]]:
    """nft element text and tc lines from the old entries of `new_entries`' members to the
    new ones, with the new sums and counts of the sets and shapers touched."""
    before: dict[str, set[str]] = {}
    after: dict[str, set[str]] = {}
    old_classes: dict[tuple[int, int], tuple[int, int]] = {}
    new_classes: dict[tuple[int, int], tuple[int, int]] = {}
    for mid, entry in new_entries.items():
        old = base.entries.get(mid)
        if old is not None:
            for name, elements in old.named.items():
                before.setdefault(name, set()).update(elements)
            if old.classes is not None:
                old_classes[old.classes[:2]] = old.classes[2:]
        if entry is not None:
            for name, elements in entry.named.items():
                after.setdefault(name, set()).update(elements)
            if entry.classes is not None:
                new_classes[entry.classes[:2]] = entry.classes[2:]
    deletes: list[str] = []
    adds: list[str] = []
    sums: dict[str, int] = {}
    counts: dict[str, int] = {}
    n_add = n_del = 0
    for name in base.order:
        b = before.get(name, set())
        a = after.get(name, set())
        if b == a:
            continue
        gone = sorted(b - a)
        came = sorted(a - b)
        if not gone and not came:
            continue
        if base.fast_path and (gone or (came and name in FAST_PATH_REPLACED_ON_ADD)):
            raise NotExpressible("fast path: a removal or a newly shaped member")
        count = base.counts[name] - len(gone) + len(came)
        size = base.hashed.get(name)
        if size is not None and capacity(count) != size:
            raise NotExpressible(f"set {name} changes its size")
        prefix = base.where[name]
        if gone:
            keys = ", ".join(_key(e) for e in gone) if name in base.maps else ", ".join(gone)
            deletes.append(f"delete element {prefix} {name} {{ {keys} }}\n")
        if came:
            adds.append(f"add element {prefix} {name} {{ {', '.join(came)} }}\n")
        total = base.sums[name] + sum(_h(e) for e in came) - sum(_h(e) for e in gone)
        sums[name] = total % MOD256
        counts[name] = count
        n_add += len(came)
        n_del += len(gone)
    for name in set(before) | set(after):
        if name not in base.where:
            raise NotExpressible(f"set {name} is not in the rule set")
    tc: list[str] = []
    class_sums: dict[str, tuple[int, int]] = {}
    n_classes = 0
    if old_classes != new_classes:
        for dev, down in base.shaper_devs:
            pick = 0 if down else 1

            def cls_of(key: tuple[int, int], rates: tuple[int, int], p: int = pick) -> HtbClass:
                return HtbClass(key[0], key[1], rates[p], rates[p])

            total, count = base.class_sums[dev]
            for key in sorted(old_classes.keys() - new_classes.keys()):
                c = cls_of(key, old_classes[key])
                tc.append(class_line("del", dev, c))
                total -= _h(_class_text(dev, c))
                count -= 1
                n_classes += 1
            for key in sorted(new_classes):
                c = cls_of(key, new_classes[key])
                was = old_classes.get(key)
                old_c = cls_of(key, was) if was is not None else None
                if old_c == c:
                    continue
                tc.append(class_line("replace", dev, c))
                if old_c is not None:
                    total -= _h(_class_text(dev, old_c))
                else:
                    count += 1
                total += _h(_class_text(dev, c))
                n_classes += 1
            class_sums[dev] = (total % MOD256, count)
    return (
        "".join(deletes) + "".join(adds),
        "".join(tc),
        n_add,
        n_del,
        n_classes,
        sums,
        counts,
        class_sums,
    )


__all__ = [
    "DeltaBase",
    "NotExpressible",
    "content_digest",
    "delta_step",
    "named_elements",
]
