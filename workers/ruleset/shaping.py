"""Shaping: the HTB class of each shaped member and the shaper trees of a host."""

import functools
import operator
from collections.abc import Iterable

from workers.ruleset.host import Host
from workers.ruleset.ir import HtbClass, Shaper
from workers.ruleset.memo import MEMO, Classes
from workers.ruleset.snapshot import Snapshot
from workers.ruleset.values import (
    ShapingRoot,
    SnapshotError,
)

HTB_ROOT_MAJOR = 0x1
MQ_QUEUE_MAJOR_BASE = 0x100  # the HTB under mq queue q: from here up (queue_majors)
DEFAULT_MINOR = 0x2  # unshaped traffic
FIRST_MEMBER_MINOR = 0x10
MINOR_SPACE = 0xFFF0 - FIRST_MEMBER_MINOR  # member minors 0x10..0xffef


def class_minors(member_ids: Iterable[int]) -> dict[int, int]:
    """Stable HTB minor per shaped member, derived from the member id (not list position).

    Ids 1..65504 map one to one (minor = 0x10 + id - 1); larger ids wrap around and, on a
    collision, probe upwards in ascending member-id order. A member therefore keeps its class
    across compiles; only wrapped ids (above 65504) can ever move, and only on a collision.
    """
    taken: set[int] = set()
    result: dict[int, int] = {}
    for mid in sorted(member_ids):
        slot = (mid - 1) % MINOR_SPACE
        if slot in taken:
            for _ in range(MINOR_SPACE):
                slot = (slot + 1) % MINOR_SPACE
                if slot not in taken:
                    break
            else:
                raise SnapshotError(f"member #{mid}: more than {MINOR_SPACE} shaped members")
        taken.add(slot)
        result[mid] = FIRST_MEMBER_MINOR + slot
    return result


def _qdisc_hash_bucket(handle: int) -> int:
    # The kernel's hash_32(handle, 4): the bucket of a device's qdisc hash table (16 buckets).
    return ((handle * 0x61C88647) & 0xFFFFFFFF) >> 28


@functools.cache
def queue_majors(queues: int) -> tuple[int, ...]:
    """HTB majors of the mq queues 0..queues-1: from 0x100 upwards, skipping every major whose
    handle falls into the kernel's qdisc hash bucket of handle 0 (0x10b, 0x11e, 0x120, 0x133,
    ...). Every HTB class's default leaf qdisc is an invisible pfifo with handle 0 in that
    bucket, and every ``tc class`` line looks its HTB up by handle: under such a major each
    line walks all leaf qdiscs of the device (`qdisc_match_from_root`; measured: 50,000 classes
    replaced in 8.4 s on mq32, 0.7 s on mq8, whose majors all miss it). Up to 11 queues the
    majors are 0x100 + q."""
    majors: list[int] = []
    major = MQ_QUEUE_MAJOR_BASE
    while len(majors) < queues:
        if _qdisc_hash_bucket(major << 16) != _qdisc_hash_bucket(0):
            majors.append(major)
        major += 1
    return tuple(majors)


def queue_major(queue: int, queues: int) -> int:
    """HTB major of mq queue `queue` of `queues` (`queue_majors`)."""
    return queue_majors(queues)[queue]


def class_major(host: Host, member_id: int) -> int:
    """HTB major of a member's class: the single root, or the HTB of its mq queue."""
    if host.shaping_root is ShapingRoot.MQ:
        return queue_major(member_id % host.tx_queues, host.tx_queues)
    return HTB_ROOT_MAJOR


_class_order = operator.attrgetter("major", "minor", "rate_kbit", "ceil_kbit")


def shapers(snapshot: Snapshot) -> tuple[Shaper, ...]:
    """HTB trees: download on member-side interfaces, upload on uplinks; one class per member."""
    host = snapshot.host
    mq = host.shaping_root is ShapingRoot.MQ
    layout = (mq, host.tx_queues if mq else 0)
    last = MEMO.classes
    if last is not None and last.members is snapshot.members and last.layout == layout:
        down, upc = last.down, last.up
    else:
        shaped = [m for m in snapshot.members if m.shaping is not None]
        minors = class_minors(m.id for m in shaped)
        down_list: list[HtbClass] = []
        up_list: list[HtbClass] = []
        for m in shaped:
            assert m.shaping is not None  # noqa: S101  (narrowing for the type checker)
            major = class_major(host, m.id)
            minor = minors[m.id]
            down_list.append(HtbClass(major, minor, m.shaping.down_kbit, m.shaping.down_kbit))
            up_list.append(HtbClass(major, minor, m.shaping.up_kbit, m.shaping.up_kbit))
        down_list.sort(key=_class_order)  # HtbClass order, compared in C (not its __lt__)
        up_list.sort(key=_class_order)
        down, upc = tuple(down_list), tuple(up_list)
        MEMO.classes = Classes(snapshot.members, layout, down, upc)
    out = [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, down)
        for dev in host.member_interfaces
    ]
    out += [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, upc)
        for dev in host.uplink_interfaces
    ]
    return tuple(sorted(out, key=lambda s: s.dev))
