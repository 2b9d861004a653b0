"""Kea's lease file (its memfile, `lease-database.name`), read from a position: the part of a
lease round that needs no Kea (`kea.leases_since` asks Kea only when the position does not fit).

Kea appends one line for every lease it adds, renews, reclaims or deletes (a deletion:
valid_lifetime 0) and rewrites the file only in its lease file cleanup (LFC: the file is renamed
and a new one started, a new inode). So the lines after a position are exactly the leases that
changed since: a round reads them, not Kea.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from .common import JSON

CURSOR_CHECK_HEAD = 4096  # the bytes of the file's start and of the part before the position
CURSOR_CHECK_TAIL = 512  # that the cursor's check covers (a reused inode number is not enough)
CURSOR_CHECK_MAX = (1 << 48) - 1
MAX_APPENDED_BYTES = 512 * 1024 * 1024  # more than a mass reconnect of 1,000,000 leases writes
_ESCAPED = re.compile(rb"&#x([0-9a-fA-F]{2})")


def lease_file(config: JSON) -> Path | None:
    """The memfile Kea keeps its leases in, or None (no file: persist false, another backend)."""
    try:
        database = config["Dhcp4"].get("lease-database") or {}
    except (KeyError, TypeError, AttributeError):
        return None
    if database.get("type") != "memfile" or database.get("persist") is False:
        return None
    name = database.get("name")
    return Path(name) if isinstance(name, str) and name.startswith("/") else None


def check(handle: Any, offset: int) -> int:
    """A fingerprint of the file up to `offset`: its first and its last bytes before it."""
    handle.seek(0)
    head = handle.read(min(offset, CURSOR_CHECK_HEAD))
    tail_from = max(0, offset - CURSOR_CHECK_TAIL)
    handle.seek(tail_from)
    tail = handle.read(offset - tail_from)
    digest = hashlib.blake2b(head + b"|" + tail, digest_size=6).digest()
    return int.from_bytes(digest, "big")


def line_end(handle: Any, size: int) -> int:
    """The position after the last whole line of the first `size` bytes (Kea may be writing)."""
    start = max(0, size - 65536)
    handle.seek(start)
    data = handle.read(size - start)
    cut = data.rfind(b"\n")
    return start + cut + 1 if cut >= 0 else (0 if start == 0 else start)


def columns_of(header: bytes) -> dict[str, int] | None:
    names = header.decode("ascii", "replace").strip().split(",")
    wanted = ("address", "hwaddr", "valid_lifetime", "expire", "hostname", "state")
    return {n: names.index(n) for n in wanted} if all(n in names for n in wanted) else None


def appended_leases(
    data: bytes, columns: dict[str, int]
) -> tuple[dict[str, list[Any] | None], int]:
    """The lease lines in `data`, the last line of each address winning: address -> the row
    as `leases` gives it, or None when that last line deleted the lease (valid_lifetime 0);
    and how many lines did not parse (they are left out; the next full reading has them)."""
    latest: dict[str, list[Any] | None] = {}
    bad = 0
    width = max(columns.values()) + 1
    for line in data.split(b"\n"):
        if not line or line.startswith(b"address,"):
            continue  # the header (a new file, or the start of the file)
        fields = line.rstrip(b"\r").split(b",")  # Kea escapes commas in values (&#x2c)
        try:
            if len(fields) < width:
                raise ValueError("short line")
            address = fields[columns["address"]].decode("ascii")
            valid = int(fields[columns["valid_lifetime"]])
            expire = int(fields[columns["expire"]])
            state = int(fields[columns["state"]] or 0)
            mac = fields[columns["hwaddr"]].decode("ascii")
            hostname = _ESCAPED.sub(
                lambda m: bytes([int(m.group(1), 16)]), fields[columns["hostname"]]
            ).decode("latin-1")  # Kea keeps a name's characters as bytes (as its JSON says them)
        except ValueError:
            bad += 1
            continue
        latest.pop(address, None)  # keep the order of the last change
        latest[address] = None if valid == 0 else [address, mac, expire - valid, valid, hostname,
                                                    state]  # fmt: skip
    return latest, bad
