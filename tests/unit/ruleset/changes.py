"""Random member changes for the delta compile's equivalence tests (unit and kernel).

`Site` is a small valid "database" of members; `Site.step(rng)` applies one random change of
the kinds a change record names (device added, removed or moved to another member; forward
added, removed or switched; IPv6 opening added or removed; a member leaving or coming back; a
public IPv4 given or taken; shaping changed) and answers the changed members (id -> new value,
None: no longer on the host). Every state is a valid snapshot; some members share the /64 of
room 1, so moves make /64s shared and unshared.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Sequence

from workers.ruleset import snapshot as s

V6_BASE = int(ipaddress.IPv6Address("2001:db8:100::"))
V4_BASE = int(ipaddress.IPv4Address("10.100.0.0"))
PROFILES = (None, s.Shaping(4000, 1000), s.Shaping(8000, 2000), s.Shaping(24000, 6000))


class Site:
    """Members on the host (`members`) and members that left (`away`), with free addresses."""

    def __init__(self, rng: random.Random, n: int, ids: Sequence[int] = range(1, 400)) -> None:
        self.members: dict[int, s.Member] = {}
        self.away: dict[int, s.Member] = {}
        self.free_pub = list(range(1, 255))
        rng.shuffle(self.free_pub)
        self.next_v4 = 2
        self.next_device = 1
        self.next_row = 1
        self.v6_used: set[int] = set()
        for mid in rng.sample(ids, n):
            pub = self._pub() if rng.random() < 0.75 else None
            m = s.Member(id=mid, public_ipv4=pub, shaping=rng.choice(PROFILES))
            for _ in range(rng.randint(0, 3)):
                m = self._with_device(rng, m)
            for _ in range(rng.randint(0, 3)):
                m = self._with_forward(rng, m) or m
            for _ in range(rng.randint(0, 2)):
                m = self._with_opening(rng, m) or m
            self.members[mid] = m

    # ------------------------------------------------------------------------------ values
    def _pub(self) -> str:
        return f"198.51.100.{self.free_pub.pop()}"

    def _room(self, rng: random.Random, mid: int) -> int:
        return V6_BASE + ((1 if rng.random() < 0.3 else (mid % 60000) + 2) << 64)

    def _with_device(self, rng: random.Random, m: s.Member) -> s.Member:
        did = self.next_device
        self.next_device += 1
        ipv4 = None
        if rng.random() < 0.9:
            ipv4 = str(ipaddress.IPv4Address(V4_BASE + self.next_v4))
            self.next_v4 += 1
        v6 = []
        for _ in range(rng.randint(0, 2)):
            a = self._room(rng, m.id) + rng.randint(1, 2**32)
            if a not in self.v6_used:
                self.v6_used.add(a)
                v6.append(str(ipaddress.IPv6Address(a)))
        return _replace(m, devices=(*m.devices, s.Device(id=did, ipv4=ipv4, ipv6=tuple(v6))))

    def _row(self) -> int:
        self.next_row += 1
        return self.next_row

    def _with_forward(self, rng: random.Random, m: s.Member) -> s.Member | None:
        targets = [d for d in m.devices if d.ipv4 is not None]
        if m.public_ipv4 is None or not targets:
            return None
        proto = rng.choice(list(s.Protocol))
        first = rng.randint(1, 65000)
        last = first + rng.choice((0, 0, 0, 3, 9))
        pr = s.PortRange(first, last)
        taken = [f for f in m.forwards if f.enabled]
        if any(pr.overlaps(f.public_ports) and set(f.protocol.l4) & set(proto.l4) for f in taken):
            return None
        shift = rng.choice((0, 0, 5))
        target = s.PortRange(first + shift, last + shift)
        dev = rng.choice(targets)
        f = s.PortForward(self._row(), proto, pr, dev.id, target)
        return _replace(m, forwards=(*m.forwards, f))

    def _with_opening(self, rng: random.Random, m: s.Member) -> s.Member | None:
        if not m.devices:
            return None
        dev = rng.choice(m.devices)
        kind = rng.random()
        ports = (
            None if kind < 0.2 else s.PortRange(p := rng.randint(1, 65000), p + (kind > 0.7) * 7)
        )
        o = s.Opening(self._row(), dev.id, rng.choice(list(s.Protocol)), ports)
        return _replace(m, openings=(*m.openings, o))

    # ------------------------------------------------------------------------------- steps
    def snapshot(self, policy: s.Policy, host: s.Host) -> s.Snapshot:
        """The full compile's input: every member on the host, by id."""
        return s.Snapshot(
            policy=policy,
            host=host,
            members=tuple(sorted(self.members.values(), key=lambda m: m.id)),
        )

    def step(self, rng: random.Random) -> dict[int, s.Member | None]:
        """One random change; the changed members (id -> new value or None)."""
        while True:
            kind = rng.choice(KINDS)
            changed = kind(self, rng)
            if changed:
                for mid, m in changed.items():
                    if m is None:
                        self.away[mid] = self.members.pop(mid)
                    else:
                        self.away.pop(mid, None)
                        self.members[mid] = m
                return changed

    def _pick(self, rng: random.Random) -> s.Member:
        return self.members[rng.choice(sorted(self.members))]

    def device_add(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        return {m.id: self._with_device(rng, m)}

    def device_remove(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        if not m.devices:
            return {}
        gone = rng.choice(m.devices).id
        return {m.id: _without_device(m, gone)}

    def device_move(self, rng: random.Random) -> dict[int, s.Member | None]:
        if len(self.members) < 2:
            return {}
        a, b = (self.members[i] for i in rng.sample(sorted(self.members), 2))
        if not a.devices:
            return {}
        d = rng.choice(a.devices)
        return {a.id: _without_device(a, d.id), b.id: _replace(b, devices=(*b.devices, d))}

    def forward_add(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        new = self._with_forward(rng, m)
        return {m.id: new} if new is not None else {}

    def forward_remove(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        if not m.forwards:
            return {}
        gone = rng.choice(m.forwards).id
        return {m.id: _replace(m, forwards=tuple(f for f in m.forwards if f.id != gone))}

    def opening_add(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        new = self._with_opening(rng, m)
        return {m.id: new} if new is not None else {}

    def opening_remove(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        if not m.openings:
            return {}
        gone = rng.choice(m.openings).id
        return {m.id: _replace(m, openings=tuple(o for o in m.openings if o.id != gone))}

    def status(self, rng: random.Random) -> dict[int, s.Member | None]:
        """A member leaves the network (ended, suspended) or one that left comes back."""
        if self.away and rng.random() < 0.5:
            mid = rng.choice(sorted(self.away))
            return {mid: self.away[mid]}
        if len(self.members) < 2:
            return {}
        return {self._pick(rng).id: None}

    def public(self, rng: random.Random) -> dict[int, s.Member | None]:
        """A public IPv4 given (from the pool) or taken back (its forwards go with it)."""
        m = self._pick(rng)
        if m.public_ipv4 is None:
            return {m.id: _replace(m, public_ipv4=self._pub())}
        self.free_pub.insert(0, int(str(m.public_ipv4).rsplit(".", 1)[1]))  # reused last
        return {m.id: _replace(m, public_ipv4=None, forwards=())}

    def shaping(self, rng: random.Random) -> dict[int, s.Member | None]:
        m = self._pick(rng)
        profile = rng.choice([p for p in PROFILES if p != m.shaping])
        return {m.id: _replace(m, shaping=profile)}


KINDS = (
    Site.device_add,
    Site.device_remove,
    Site.device_move,
    Site.forward_add,
    Site.forward_add,
    Site.forward_remove,
    Site.opening_add,
    Site.opening_remove,
    Site.status,
    Site.public,
    Site.shaping,
)


def _replace(m: s.Member, **changes: object) -> s.Member:
    fields = {
        "id": m.id,
        "public_ipv4": m.public_ipv4,
        "devices": m.devices,
        "forwards": m.forwards,
        "openings": m.openings,
        "shaping": m.shaping,
        "ipv6_prefixes": m.ipv6_prefixes,
    }
    fields.update(changes)
    return s.Member(**fields)  # type: ignore[arg-type]


def _without_device(m: s.Member, device_id: int) -> s.Member:
    return _replace(
        m,
        devices=tuple(d for d in m.devices if d.id != device_id),
        forwards=tuple(f for f in m.forwards if f.device_id != device_id),
        openings=tuple(o for o in m.openings if o.device_id != device_id),
    )
