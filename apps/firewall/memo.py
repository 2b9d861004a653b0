"""What the push path keeps from one run to the next, in one place: `PUSH_MEMO`.

A firewall worker reads, compiles and pushes the same sites again and again while a few members
change. Everything it keeps between runs, on the portal's side and the compiler's, is reached
from here, with its lifetime and how it is invalidated:

| part | kept | invalidated |
|---|---|---|
| `members` | each member's typed value, reservations and the key it was built from (snapshot.py) | by key: the member's row, the revision the triggers of migration firewall 0004 keep for its devices, forwards and openings, the default shaping profile; `epoch` (a new database) forgets all |
| `dhcp` | per host: the inputs of its last `rs.Dhcp` and the object (snapshot.py `_dhcp_build`) | by equality of the inputs |
| `compiled` | per host: its last `COMPILED_KEPT` compiled rule sets by content hash, with their snapshot (compiled.py) | by content hash: an increment is made only between two hashes the host confirmed and this process compiled |
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


class MemberCache:
    """This process's typed members of the last read, each with the key it was built from:
    the member's own row (status, public IPv4, prefix, shaping rates), the revision the
    triggers of migration firewall 0004 keep for its devices, forwards and openings, and the
    default shaping profile where it applies. A member whose key is unchanged is reused as is;
    only changed members are read and validated again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch: int | None = None
        self.keys: dict[int, tuple[Any, ...]] = {}
        self.members: dict[int, rs.Member] = {}
        self.reservations: dict[int, Reservations] = {}

    def clear(self) -> None:
        with self.lock:
            self.forget()

    def forget(self) -> None:
        self.epoch = None
        self.keys.clear()
        self.members.clear()
        self.reservations.clear()


@dataclass(slots=True)
class PushMemo:
    """Every cache of the push path (see the module's table)."""

    members: MemberCache = field(default_factory=MemberCache)
    dhcp: dict[int, DhcpBuilt] = field(default_factory=dict)  # host pk ->
    compiled: dict[int, dict[str, CompiledEntry]] = field(default_factory=dict)  # host pk ->
    compiler: CompilerMemo = field(default_factory=lambda: MEMO)  # the one of this process

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
        self.compiler.clear()


PUSH_MEMO = PushMemo()
