"""What the push path keeps from one run to the next, in one place: `PUSH_MEMO`.

A firewall worker reads, compiles and pushes the same sites again and again while a few members
change. Everything it keeps between runs, on the portal's side and the compiler's, is reached
from here, with its lifetime and how it is invalidated:

| part | kept | invalidated |
|---|---|---|
| `members` | each member's typed value, reservations and the key it was built from, and the database snapshot of the read (snapshot.py) | by the revisions the triggers of migrations firewall 0004 and 0019 write for every row read for a member (its row, room, public IPv4, test access and profile, devices, forwards, openings): a read since a known snapshot reads only the members written since; a checking read (full compiles) compares every member's key; the default shaping profile by value; `epoch` (a new database, a TRUNCATE) forgets all |
| `dhcp` | per host: the inputs of its last `rs.Dhcp` and the object (snapshot.py `_dhcp_build`) | by equality of the inputs |
| `compiled` | per host: its last `COMPILED_KEPT` compiled rule sets by content hash, with their snapshot (compiled.py) | by content hash: an increment is made only between two hashes the host confirmed and this process compiled |
| `delta` | per host: its delta base (`workers.ruleset.delta.DeltaBase`) and the snapshot it describes, with the version id it names (compiled.py `delta_compile`) | by version: used only while the host runs that version; dropped after a refused or failed push, a `NotExpressible` step or anything but members changed; built again after a full compile the host runs |
| `compiler` | the compiler's memo (workers/ruleset/memo.py: elements, member sets, HTB classes, checks, JSON rows) | by identity of the typed members it was made from |

Not kept here: the SSH connections (`transport.POOL`, a pool of live connections, not a cache
of values) and, per database read, `SnapshotData.for_buildings` (its lifetime is that read).

Lifetime: the worker process. Nothing here is shared between processes; a fresh worker starts
empty and falls back to the stored snapshot of the version a host runs (compiled.py
`increment_for`). `PUSH_MEMO.clear()` forgets everything (tests, benchmarks, a compile from
nothing); `snapshot_cache_clear()` (snapshot.py) only the members.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from workers import ruleset as rs
from workers.ruleset.delta import DeltaBase
from workers.ruleset.memo import MEMO, CompilerMemo

COMPILED_KEPT = 3  # compiled rule sets kept per host: the running one, the new one, one spare

Reservations = tuple[tuple[str, str, str | None], ...]  # (MAC, IPv4, IPv6) of a member's devices


class CompiledEntry(NamedTuple):
    """One compiled rule set of a host: the base of the next increment."""

    compiled: rs.Compiled
    snapshot: rs.Snapshot


class DhcpBuilt(NamedTuple):
    """A host's last DHCP input: reused while its inputs are equal."""

    inputs: tuple[Any, ...]
    dhcp: rs.Dhcp
    members: tuple[int, ...] = ()  # the member ids of `inputs`' per-member reservations


class MemberCache:
    """This process's typed members of the last read, each with the key it was built from:
    the member's own row (status, public IPv4, prefix, shaping rates), the revision the
    triggers of migrations firewall 0004 and 0019 keep for every row read for it, and the
    default shaping profile where it applies. A member whose key is unchanged is reused as is;
    only changed members are read and validated again. With the database snapshot of the last
    read, the next one reads only the members whose revision a transaction wrote since."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch: int | None = None
        # The database snapshot (`pg_current_snapshot()`, as text) the cache describes: set by
        # a read in a transaction of its own, None when the next read must check every key.
        self.snapshot: str | None = None
        self.default_profile: tuple[int, int] | None = None
        # All four in member id order, networked members only.
        self.keys: dict[int, tuple[Any, ...]] = {}
        self.members: dict[int, rs.Member] = {}
        self.reservations: dict[int, Reservations] = {}
        self.buildings: dict[int, int | None] = {}

    def clear(self) -> None:
        with self.lock:
            self.forget()

    def forget(self) -> None:
        self.epoch = None
        self.snapshot = None
        self.default_profile = None
        self.keys.clear()
        self.members.clear()
        self.reservations.clear()
        self.buildings.clear()


@dataclass(slots=True)
class DeltaState:
    """A host's delta base: what it runs once it confirmed `content_hash` (the version id), with
    the snapshot the base describes (its non-member parts decide whether a step may be taken)
    and the version's file artefacts' hashes (a step changes only Kea's and portal-ra's, for devices)."""

    content_hash: str
    base: DeltaBase
    snapshot: rs.Snapshot
    file_hashes: dict[str, str]
    unrendered: Any = None  # the RuleSetVersion of the last step, until its texts are stored


@dataclass(slots=True)
class PushMemo:
    """Every cache of the push path (see the module's table)."""

    members: MemberCache = field(default_factory=MemberCache)
    dhcp: dict[int, DhcpBuilt] = field(default_factory=dict)  # host pk ->
    compiled: dict[int, dict[str, CompiledEntry]] = field(default_factory=dict)  # host pk ->
    compiler: CompilerMemo = field(default_factory=lambda: MEMO)  # the one of this process
    delta: dict[int, DeltaState] = field(default_factory=dict)  # host pk ->

    def compiled_remember(
        self, host_id: int, content_hash: str, compiled: rs.Compiled, snapshot: rs.Snapshot
    ) -> None:
        """Keep a host's newest compiled rule set (the oldest beyond `COMPILED_KEPT` goes)."""
        entries = self.compiled.setdefault(host_id, {})
        entries.pop(content_hash, None)
        entries[content_hash] = CompiledEntry(compiled, snapshot)
        while len(entries) > COMPILED_KEPT:
            entries.pop(next(iter(entries)))

    def compiled_entry(self, host_id: int, content_hash: str | None) -> CompiledEntry | None:
        """What this process compiled into `content_hash` for the host, if it still has it."""
        if content_hash is None:
            return None
        return self.compiled.get(host_id, {}).get(content_hash)

    def clear(self) -> None:
        """Forget everything, the compiler's memo too: the next run starts from nothing."""
        self.members.clear()
        self.dhcp.clear()
        self.compiled.clear()
        self.delta.clear()
        self.compiler.clear()


PUSH_MEMO = PushMemo()
