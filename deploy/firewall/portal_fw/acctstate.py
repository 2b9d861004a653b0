"""The carried traffic totals (acct.json) and what a full replacement read before its commit.

A full replacement (nft.replace_carrying) resets every accounting counter: the agent reads
them while the loader parses the new text, writes them to acct.pending.json tagged with the
handle of the table they were read from (nft gives every table a new handle, per network
namespace, never reused before a reboot), and folds them into acct.json's base after the
answer. Whoever settles the pending file first (the work after the answer, the `traffic` verb,
the next full replacement) decides by the handle of the table that runs now:

* the table they were read from still runs (the load was refused, or the agent died before the
  commit): the kernel still counts them, the pending file is dropped;
* it is gone: they are added to the base once; the base records the handle it folded
  (`folded_table`), so a death between writing the base and removing the pending file does
  not add them a second time.
"""

from __future__ import annotations

import contextlib
import errno
import json
import secrets
import time
from pathlib import Path

from .common import JSON, run
from .host import Host
from .netlink import (
    NFPROTO,
    NFT_MSG_GETTABLE,
    NFTA_TABLE_NAME,
    NetlinkError,
    NftNetlink,
    nla_first,
    nla_str,
)

NFTA_TABLE_HANDLE = 4
Counted = dict[str, dict[str, list[int]]]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def pending_file(host: Host) -> Path:
    return host.acct_file.with_name("acct.pending.json")


def table_handle(host: Host) -> int | None:
    """The handle of the portal's `inet fw` table (None: there is none)."""
    name = f"{host.prefix}fw"
    try:
        with NftNetlink() as nl:
            request = nl.request(
                NFT_MSG_GETTABLE, NFPROTO["inet"], nla_str(NFTA_TABLE_NAME, name), dump=False
            )
            for _family, payload in request:
                handle = nla_first(payload, NFTA_TABLE_HANDLE)
                return int.from_bytes(handle, "big") if handle else None
            return None
    except NetlinkError as exc:
        if exc.errno == errno.ENOENT:
            return None
    except OSError:
        pass
    result = run(["nft", "-j", "list", "tables"])  # netlink refused: nft's own answer
    if result.returncode != 0:
        raise NetlinkError("cannot read the portal table's handle")
    for item in json.loads(result.stdout or "{}").get("nftables", []):
        table = item.get("table")
        if table and table.get("family") == "inet" and table.get("name") == name:
            return int(table["handle"])
    return None


def read_acct_state(host: Host) -> JSON:
    """The carried totals: {"epoch", "boot", "folded_at", "base": {set: {key: [p, b]}}}. A new
    epoch after a reboot (the kernel's counters restarted) or a lost file: the portal then
    takes the totals as new."""
    state = host.read_json(host.acct_file)
    if not state or state.get("boot") != boot_id() or not isinstance(state.get("base"), dict):
        state = {"epoch": secrets.token_hex(8), "boot": boot_id(), "folded_at": 0, "base": {}}
        host.write_json(host.acct_file, state, compact=True)
    return state


def fold(state: JSON, counted: Counted) -> None:
    base = state["base"]
    for name, counters in counted.items():
        carried = base.setdefault(name, {})
        get = carried.get
        for key, (packets, octets) in counters.items():
            if packets or octets:
                before = get(key)
                carried[key] = (
                    [before[0] + packets, before[1] + octets] if before else [packets, octets]
                )
    state["folded_at"] = int(time.time())


def carry_counters(host: Host, counted: Counted) -> None:
    """Add counters the kernel no longer holds (an increment deleted their elements) to the
    base, at once."""
    state = read_acct_state(host)
    fold(state, counted)
    host.write_json(host.acct_file, state, compact=True)
    host.log({"event": "traffic-carried", "keys": sum(len(c) for c in counted.values())})


def write_pending(host: Host, handle: int, counted: Counted) -> None:
    """The counters of table `handle`, read before a replacement of it: carried once it is gone."""
    state = {"boot": boot_id(), "table": handle, "read_at": time.time(), "counted": counted}
    host.write_json(pending_file(host), state, compact=True)


def settle_now(host: Host) -> None:
    """`settle` against the table that runs now (looked up only when there is a pending file)."""
    if pending_file(host).exists():
        settle(host, table_handle(host))


def settle(host: Host, handle: int | None) -> None:
    """Fold or drop acct.pending.json (see the module's docstring); `handle`: the running
    table's (None: there is none)."""
    path = pending_file(host)
    if not path.exists():
        return
    pending = host.read_json(path)
    state = read_acct_state(host)
    if (
        pending is not None
        and pending.get("boot") == state["boot"]
        and pending.get("table") != handle
        and pending.get("table") != state.get("folded_table")
        and isinstance(pending.get("counted"), dict)
    ):
        started = time.monotonic()
        fold(state, pending["counted"])
        state["folded_table"] = pending["table"]
        host.write_json(host.acct_file, state, compact=True)
        host.log({"event": "traffic-carried", "table": pending["table"],
                  "keys": sum(len(c) for c in pending["counted"].values()),
                  "s": round(time.monotonic() - started, 3)})  # fmt: skip
    elif pending is not None and pending.get("table") == handle:
        host.log({"event": "traffic-carry-dropped", "table": handle})  # still counted there
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
