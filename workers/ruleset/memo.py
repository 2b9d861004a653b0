"""What the compiler keeps from one compile to the next, in one place: `MEMO`.

A worker compiles the same site again and again while a few members change, and the portal's
snapshot reader hands over the very same `Member` (and `Dhcp`) objects for what did not change.
Every cache here is keyed by that identity, so it can never hand back something stale: an entry
is used only when the object it was made from is the object asked about (`is`), plus the few
things outside the object that shape the answer (a host's HTB layout, whether a /64 is shared).

Lifetime: the process. Each cache is bounded: only the last compile's members are kept (a new
compile replaces the entries), per host for at most `ELEMENT_HOSTS` hosts, `OWNERS_KEPT` pairs
of host networks and `DHCP_KEPT` DHCP objects. Invalidation: none is needed (identity); `clear()`
forgets everything, for a compile from nothing (tests, benchmarks).

Who reads and writes what:

| field | written by | reused when |
|---|---|---|
| `elements` | `sets.member_sets` | the same member, HTB class and shared /64s on that host |
| `member_sets` | `sets.member_sets` | the same members tuple and layout (the pair's other host) |
| `classes` | `shaping.shapers` | the same members tuple and HTB layout |
| `owners` | `checks._check_global` | the same host networks: only changed members are checked |
| `member_json` | `snapshot.snapshot_to_json` | the same member object: its JSON row |
| `dhcp_json` | `snapshot.snapshot_to_json` | the same `Dhcp` object: its JSON |

The pure memos of values (`values._network_text`, `values._port_range`, `render`'s profile
texts) are `functools.lru_cache`s of their arguments alone and need no invalidation either.
The portal's side of the push path keeps its own caches in `apps/firewall/memo.py`, whose
`clear()` clears this one too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from workers.ruleset.host import Dhcp
from workers.ruleset.ir import HtbClass, SetDef
from workers.ruleset.member import Member

ELEMENT_HOSTS = 64
OWNERS_KEPT = 8
DHCP_KEPT = 8

Parts = tuple[tuple[int, tuple[str, ...]], ...]  # (set index, elements) for non-empty sets
# member id -> (member, classid, shared flags of its /64s, its /64s, parts). A plain tuple: a
# compile from nothing makes one per member (100,000), a NamedTuple's constructor costs more.
ElementEntry = tuple[Member, str, tuple[bool, ...], tuple[int, ...], Parts]
Entries = dict[int, ElementEntry]


class Owners(Protocol):
    """Who holds each unique key in the members checked so far (checks._Owners)."""

    by_id: dict[int, Member]

    def add(self, m: Member) -> None: ...

    def remove(self, m: Member) -> None: ...


class MemberSets(NamedTuple):
    """The last `member_sets` answer, for the other host of a pair (same read, same tuple)."""

    members: tuple[Member, ...]
    layout: tuple[bool, int, bool, bool]  # (mq, queues, SYN proxy, fast path)
    sets: tuple[SetDef, ...]
    entries: Entries


class Classes(NamedTuple):
    """The last shapers' HTB classes, for the other host of a pair."""

    members: tuple[Member, ...]
    layout: tuple[bool, int]  # (mq, queues)
    down: tuple[HtbClass, ...]
    up: tuple[HtbClass, ...]


@dataclass(slots=True)
class CompilerMemo:
    """Every cache of the compiler (see the module's table)."""

    elements: dict[tuple[str, bool], Entries] = field(default_factory=dict)  # (host, SYN proxy)
    member_sets: MemberSets | None = None
    classes: Classes | None = None
    owners: dict[tuple[Any, Any], Owners] = field(default_factory=dict)
    owners_lock: threading.Lock = field(default_factory=threading.Lock)
    member_json: dict[int, tuple[Member, str]] = field(default_factory=dict)
    dhcp_json: dict[int, tuple[Dhcp, str]] = field(default_factory=dict)

    def store_elements(self, key: tuple[str, bool], fresh: Entries) -> None:
        """The host's element entries of this compile, the oldest host's forgotten beyond
        `ELEMENT_HOSTS`."""
        if len(self.elements) >= ELEMENT_HOSTS and key not in self.elements:
            self.elements.pop(next(iter(self.elements)))
        self.elements[key] = fresh

    def clear(self) -> None:
        """Forget everything: the next compile starts from nothing."""
        self.elements.clear()
        self.member_sets = None
        self.classes = None
        with self.owners_lock:
            self.owners.clear()
        self.member_json = {}
        self.dhcp_json.clear()


MEMO = CompilerMemo()
