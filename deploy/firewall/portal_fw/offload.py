"""Offloaded flows of the fast path (issue 29): conntrack entries the flowtable forwards.

An offloaded flow keeps its conntrack entry, with the status bit IPS_OFFLOAD, which
`conntrack -L` prints as ``[OFFLOAD]``. Without the flowtable module loaded there is none, and
nothing is asked (the health sample stays cheap on hosts without the fast path).
"""

from __future__ import annotations

from pathlib import Path

from .common import HelperError, run

FLOWTABLE_MODULE = Path("/sys/module/nf_flow_table")


def count_offloaded(listing: str) -> int:
    """The entries of a `conntrack -L` listing marked ``[OFFLOAD]``."""
    return sum(1 for line in listing.splitlines() if "[OFFLOAD]" in line)


# `conntrack -L` alone lists IPv4 only; `-u OFFLOAD` prints only the offloaded entries.
COMMANDS = tuple(["conntrack", "-L", "-f", family, "-u", "OFFLOAD"] for family in ("ipv4", "ipv6"))


def offloaded() -> int | None:
    """Offloaded entries, IPv4 and IPv6 (None: conntrack could not be asked)."""
    if not FLOWTABLE_MODULE.exists():
        return 0
    total = 0
    for argv in COMMANDS:
        try:
            result = run(argv, timeout=30)
        except HelperError:  # not installed or too slow: no figure, never fatal
            return None
        if result.returncode != 0:
            return None
        total += count_offloaded(result.stdout)
    return total
