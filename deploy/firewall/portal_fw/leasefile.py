"""Kea's lease file (its memfile, `lease-database.name`), read from a position: the part of a
lease round that needs no Kea (`lease_round` asks Kea only when the files cannot answer).

Kea appends one line for every lease it adds, renews, reclaims or deletes (a deletion:
valid_lifetime 0) and rewrites the file only in its lease file cleanup (LFC). So the lines after
a position are exactly the leases that changed since: a round reads them, not Kea.

Kea 2.2's LFC (seen on Debian's kea-dhcp4 2.2.0 with `lfc-interval` 1 s): Kea renames the file
to `NAME.1` and starts a new `NAME` (a new inode); kea-lfc merges `NAME.2` (its last output) and
`NAME.1` into `NAME.output`, renames that to `NAME.completed`, removes `NAME.2` and `NAME.1` and
renames `NAME.completed` to `NAME.2`, within milliseconds. Kea rotates only while neither `.1`
nor `.completed` exists. So the lines after a cursor in the old file live in `.1` only while
kea-lfc runs: the agent keeps a hard link `NAME.portal-INODE` to the file each round read
(`keep_links`), and the round after an LFC reads the old file's rest through it, then the new
file (`rotated`). kea-lfc's removal of `.1` and its rename of `.completed` to `.2` give the old
file and `.2` the same ctime; a later LFC gives `.2` a later one (then a round from the files:
`.2`, `.1` and the file, which is what Kea loads when it starts).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from .common import JSON

CURSOR_CHECK_HEAD = 4096  # the bytes of the file's start and of the part before the position
CURSOR_CHECK_TAIL = 512  # that the cursor's check covers (a reused inode number is not enough)
CURSOR_CHECK_MAX = (1 << 48) - 1
MAX_APPENDED_BYTES = 512 * 1024 * 1024  # more than a mass reconnect of 1,000,000 leases writes
SAME_LFC_NS = 200_000_000  # kea-lfc removes `.1` and renames `.2` microseconds apart
LINK = ".portal-"  # NAME.portal-INODE: the agent's hard link to a lease file a round read
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


class Opened:
    """A lease file held open for one round (its inode stays readable whatever Kea renames)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        st = os.fstat(handle.fileno())
        self.inode, self.size, self.ctime = st.st_ino, st.st_size, st.st_ctime_ns
        handle.seek(0)
        self.columns = columns_of(handle.readline(4096))

    def fits(self, since: tuple[int, int, int]) -> bool:
        return (self.inode == since[0] and since[1] <= self.size
                and check(self.handle, since[1]) == since[2])  # fmt: skip


class Files:
    """The lease file and Kea's LFC files (`.1`, `.2`, `.completed`, the agent's links), each
    opened at most once in a round; `moved` says whether a name now names another file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: dict[str, Opened | None] = {}

    def get(self, suffix: str) -> Opened | None:
        if suffix not in self.opened:
            name = self.path.with_name(self.path.name + suffix)
            try:  # never through a symbolic link planted in Kea's directory
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                self.opened[suffix] = None
            else:
                self.opened[suffix] = Opened(os.fdopen(fd, "rb"))
        return self.opened[suffix]

    def moved(self) -> bool:
        for suffix, held in self.opened.items():
            try:
                st = os.lstat(self.path.with_name(self.path.name + suffix))
            except OSError:
                now = None
            else:  # a symbolic link is never opened (O_NOFOLLOW): as if absent
                now = None if stat.S_ISLNK(st.st_mode) else st.st_ino
            if now != (held.inode if held is not None else None):
                return True
        return False

    def close(self) -> None:
        for held in self.opened.values():
            if held is not None:
                held.handle.close()


def _read(parts: list[tuple[Opened, int]]) -> tuple[dict[str, list[Any] | None], int, int]:
    """The lease lines of each file from its position to its last whole line, in order (a
    later file's line of an address wins); how many did not parse; the end in the last file."""
    latest: dict[str, list[Any] | None] = {}
    bad = end = 0
    for opened, start in parts:
        if opened.columns is None:  # (checked by the caller)
            raise ValueError("a lease file without Kea's header")
        end = line_end(opened.handle, opened.size)
        opened.handle.seek(start)
        found, wrong = appended_leases(opened.handle.read(max(0, end - start)), opened.columns)
        for address, row in found.items():
            latest.pop(address, None)
            latest[address] = row
        bad += wrong
    return latest, bad, end


def _rotated(files: Files, live: Opened, since: tuple[int, int, int]) -> list[tuple[Opened, int]]:
    """The files after the cursor when its file is no longer the lease file: its rest (as
    `.1` while kea-lfc runs, else through the agent's link), the file kea-lfc may be merging
    now, then the new file; [] when that chain cannot be told whole."""
    one = files.get(".1")
    if one is not None and one.inode == since[0]:
        old = one  # kea-lfc still runs: Kea rotates no other file meanwhile
    else:
        link = files.get(f"{LINK}{since[0]}")
        merged = files.get(".2")
        if (link is None or files.get(".completed") is not None or merged is None
                or abs(merged.ctime - link.ctime) > SAME_LFC_NS):  # fmt: skip
            return []  # not kept, or another LFC finished since the one that took this file
        old = link
    if not old.fits(since):
        return []
    between = [(one, 0)] if one is not None and one.inode not in (since[0], live.inode) else []
    return [(old, since[1]), *between, (live, 0)]


def _answer(files: Files, since: tuple[int, int, int] | None) -> JSON | None:
    live = files.get("")
    if live is None or live.columns is None:
        return None
    if since is not None and since[0] == live.inode:
        if not live.fits(since) or live.size - since[1] > MAX_APPENDED_BYTES:
            return None  # the same inode number with other bytes (or far too much): Kea
        parts, source = [(live, since[1])], "file"
    elif since is not None:
        parts, source = _rotated(files, live, since), "rotated"
        if not parts:
            completed = files.get(".completed")
            if completed is not None:
                return None  # kea-lfc between its output and `.2`: Kea
            parts = [(p, 0) for p in (files.get(".2"), files.get(".1"), live) if p is not None]
            if len(parts) == 1:
                return None  # no LFC's files: a file put there by hand? Kea
            source = "files"  # what Kea loads at its start: every lease it holds
    else:
        return None
    if (any(opened.columns is None for opened, _start in parts)
            or sum(opened.size - start for opened, start in parts) > MAX_APPENDED_BYTES):  # fmt: skip
        return None  # a file that is not Kea's, or far too much: Kea
    latest, bad, end = _read(parts)
    full = source == "files"
    return {
        "full": full,
        "from": source,
        "leases": [row for row in latest.values() if row is not None],
        "gone": [] if full else [address for address, row in latest.items() if row is None],
        "skipped_lines": bad,
        "cursor": [live.inode, end, check(live.handle, end)],
    }


def lease_round(
    path: Path | None, since: tuple[int, int, int] | None, every: Callable[[], list[list[Any]]]
) -> JSON:
    """One round: what changed since the cursor `since` (inode, offset, check), from the lease
    file's appended lines (`from` "file"), from the old file's rest and the new file after an
    LFC ("rotated"), from every file Kea loads when the old file is gone ("files", `full`), or,
    without a cursor or a file that fits, every lease from Kea (`every`: lease4-get-all,
    "kea", `full`). The answer's `cursor` is the file position the round covers (None: no
    file, every round asks Kea); a line written after it comes again in the next round."""
    if path is None:
        return {"full": True, "from": "kea", "leases": every(), "gone": [], "cursor": None}
    for _attempt in range(3):  # a name moved while the files were read (an LFC): once more
        files = Files(path)
        try:
            answer = _answer(files, since)
            if answer is None:
                break
            if answer["from"] == "file" or not files.moved():
                keep_links(path, answer["cursor"][0], since)
                return answer
        finally:
            files.close()
    files = Files(path)
    try:  # the position first, then Kea: a line written between comes again next round
        live, cursor = files.get(""), None
        if live is not None and live.columns is not None:
            end = line_end(live.handle, live.size)
            cursor = [live.inode, end, check(live.handle, end)]
            keep_links(path, live.inode, since)
    finally:
        files.close()
    return {"full": True, "from": "kea", "leases": every(), "gone": [], "cursor": cursor}


def keep_links(path: Path, inode: int, since: tuple[int, int, int] | None) -> None:
    """A hard link `NAME.portal-INODE` to the lease file a round read (so its rest survives
    an LFC until the next round), and none to any other file but the cursor's (kept while the
    portal may ask from it again: a round it did not store). At most two files' worth of
    disk beyond Kea's own; without the links (a directory the agent may not write) a round
    after an LFC reads every file."""
    keep = {inode} | ({since[0]} if since is not None else set())
    name = path.with_name(f"{path.name}{LINK}{inode}")
    with contextlib.suppress(OSError):
        if not name.exists():
            new = path.with_name(f"{path.name}{LINK}new-{os.getpid()}")
            new.unlink(missing_ok=True)
            os.link(path, new)
            if os.stat(new, follow_symlinks=False).st_ino == inode:
                os.replace(new, name)
            else:  # rotated meanwhile: the link names another file
                new.unlink()
    with contextlib.suppress(OSError):
        for other in path.parent.iterdir():
            suffix = other.name[len(path.name) + len(LINK) :]
            if (other.name.startswith(path.name + LINK) and suffix.isdigit()
                    and int(suffix) not in keep):  # fmt: skip
                other.unlink(missing_ok=True)
