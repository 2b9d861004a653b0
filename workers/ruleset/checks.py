"""The snapshot's checks across members: ids and addresses unique, inside the host's networks."""

from __future__ import annotations

import ipaddress

from workers.ruleset.host import (
    Host,
)
from workers.ruleset.member import (
    Member,
)
from workers.ruleset.memo import MEMO, OWNERS_KEPT
from workers.ruleset.values import (
    SnapshotError,
    _inside,
    _spans,
)

IPv4Address = ipaddress.IPv4Address
IPv6Address = ipaddress.IPv6Address
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network
IPNetwork = IPv4Network | IPv6Network


class _Owners:
    """Who holds each unique key (member ids, device ids, addresses by integer) in the members
    checked so far, for one pair of host networks."""

    def __init__(self, host: Host) -> None:
        self.networks = (host.private_networks, host.public_networks)
        self.private = _spans(host.private_networks) if host.private_networks else None
        self.public = _spans(host.public_networks) if host.public_networks else None
        self.by_id: dict[int, Member] = {}
        self.device: dict[int, int] = {}
        self.public_ip: dict[int, int] = {}
        self.v4: dict[int, int] = {}
        self.v6: dict[int, int] = {}

    def add(self, m: Member) -> None:
        """Check `m` against everyone added so far and take its keys (raises SnapshotError)."""
        if not isinstance(m, Member):
            raise SnapshotError(f"snapshot: {m!r} is not a Member")
        mid = m.id
        if mid in self.by_id:
            raise SnapshotError(f"member #{mid} appears twice")
        self.by_id[mid] = m
        pub = m.public_ipv4
        if pub is not None:
            key = pub._ip  # type: ignore[attr-defined]
            other = self.public_ip.setdefault(key, mid)
            if other != mid:
                raise SnapshotError(f"member #{mid}: public_ipv4 {pub} is also member #{other}'s")
            if self.public and not _inside(key, self.public):
                raise SnapshotError(
                    f"member #{mid}: public_ipv4 {pub} is outside the host's public networks"
                )
            if key in self.v4:
                self._clash(key)
        for d in m.devices:
            did = d.id
            owner = self.device.setdefault(did, mid)
            if owner != mid:
                raise SnapshotError(f"device #{did} belongs to member #{owner} and member #{mid}")
            a4 = d.ipv4
            if a4 is not None:
                key = a4._ip  # type: ignore[attr-defined]
                other = self.v4.setdefault(key, did)
                if other != did:
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv4 {a4} is also device #{other}'s"
                    )
                if self.private and not _inside(key, self.private):
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv4 {a4} is outside the host's private networks"
                    )
                if key in self.public_ip:
                    self._clash(key)
            for a6 in d.ipv6:
                other = self.v6.setdefault(a6._ip, did)  # type: ignore[attr-defined]
                if other != did:
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv6 {a6} is also device #{other}'s"
                    )

    def _clash(self, key: int) -> None:
        raise SnapshotError(
            f"device #{self.v4[key]}: ipv4 {IPv4Address(key)} is also the public_ipv4 of member "
            f"#{self.public_ip[key]}"
        )

    def remove(self, m: Member) -> None:
        """Give back the keys of `m` (a member checked before, now changed or gone)."""
        del self.by_id[m.id]
        if m.public_ipv4 is not None:
            self.public_ip.pop(m.public_ipv4._ip, None)  # type: ignore[attr-defined]
        for d in m.devices:
            self.device.pop(d.id, None)
            if d.ipv4 is not None:
                self.v4.pop(d.ipv4._ip, None)  # type: ignore[attr-defined]
            for a6 in d.ipv6:
                self.v6.pop(a6._ip, None)  # type: ignore[attr-defined]


def _check_global(host: Host, members: tuple[Member, ...]) -> None:
    """Uniqueness across members; addresses inside the host's networks when those are given.

    Keyed by the addresses' integers (`_ip`): an ipaddress object hashes through Python code
    (hash(hex(int))), which made this check most of a steady-state compile at 100,000 members.
    Incremental: members that are the very objects of the last check with the same networks
    (the worker reuses unchanged members) are not checked again.
    """
    networks = (host.private_networks, host.public_networks)
    kept = MEMO.owners  # the owners after the last check per pair of host networks
    with MEMO.owners_lock:
        owners = kept.pop(networks, None)
        if owners is None:
            owners = _Owners(host)
            changed: list[Member] = list(members)
        else:
            ids = {m.id for m in members}
            if len(ids) != len(members):
                owners = _Owners(host)  # a duplicate: the full check names it
                changed = list(members)
            else:
                by_id = owners.by_id
                changed = [m for m in members if by_id.get(m.id) is not m]
                for old in [by_id[m.id] for m in changed if m.id in by_id]:
                    owners.remove(old)
                for gone in [m for mid, m in by_id.items() if mid not in ids]:
                    owners.remove(gone)
        # Give back the keys of every changed member first: a device may move between two
        # changed members, or an address from one to the other, in the same snapshot.
        for m in changed:
            owners.add(m)  # raises: the entry stays forgotten
        kept[networks] = owners  # a failed check forgot its entry: the next starts anew
        while len(kept) > OWNERS_KEPT:
            kept.pop(next(iter(kept)))


# ------------------------------------------------------------------------------- serialisation
