"""nft: check and load one transaction of the portal tables; read what they hold.

A full load (``replace``) deletes every loaded ``portal_*`` table and loads the text in ONE
transaction, checked by that load itself (apply.loaded_as_check: ``nft -c`` of a full text
costs what its load costs; a refused ``nft -f`` changed nothing); ``check`` is the ``nft -c``
of any other nft text. An element-only increment is loaded without a separate check, as one netlink batch (elements.py; no nft process) or, for
what that does not encode, by ``nft -f -``: the kernel's transaction is atomic and refuses as a
whole, so a refused increment leaves the tables as they were.

What built the tables is kept as a base (nft.current: the last full load or restore) and a
journal of the increments since (nft.journal), so a change appends a few hundred bytes instead
of rewriting megabytes; the rollback point links both and records the journal's length.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import elements, loader
from .acctstate import carry_counters, settle, settle_now, table_handle, write_pending
from .common import NFT_TIMEOUT, TOOL_ENV, failed, run
from .host import Host
from .netlink import NetlinkError
from .traffic import read_acct_kernel, read_removed

LOADER = Path(loader.__file__).resolve()


def portal_tables(host: Host) -> list[tuple[str, str]]:
    """(family, name) of every loaded table whose name starts with the host's prefix."""
    result = run(["nft", "-j", "list", "tables"])
    if result.returncode != 0:
        raise failed("nft list tables failed", result.stderr)
    tables = []
    for item in json.loads(result.stdout or "{}").get("nftables", []):
        table = item.get("table")
        if table and table["name"].startswith(host.prefix):
            tables.append((table["family"], table["name"]))
    return tables


def dump_portal_tables(host: Host) -> str:
    """The portal tables as nft text (`nft -s list table`): slow on big sets, only used when
    nft.current is unknown."""
    parts = []
    for family, name in portal_tables(host):
        result = run(["nft", "-s", "list", "table", family, name])
        if result.returncode != 0:
            raise failed(f"nft list table {family} {name} failed", result.stderr)
        parts.append(result.stdout)
    return "".join(parts)


def transaction(host: Host, body_files: list[Path], *, replace: bool) -> str:
    lines = []
    if replace:
        lines += [f"delete table {family} {name}" for family, name in portal_tables(host)]
    lines += [f'include "{body}"' for body in body_files]
    return "\n".join(lines) + "\n"


def nft_file(host: Host, tx: str, *, check_only: bool) -> subprocess.CompletedProcess[str]:
    """`nft -c -f` or `nft -f` of the transaction `tx` (written to transaction.nft)."""
    host.write_file(host.tx_nft, tx)
    if check_only:
        return run(["nft", "-c", "-f", str(host.tx_nft)])
    if tx.startswith("delete table "):
        return replace_carrying(host)
    return load_committed(host, host.tx_nft)


def replace_carrying(host: Host) -> subprocess.CompletedProcess[str]:
    """Load transaction.nft, a full replacement, keeping what the accounting counters of the
    replaced table counted (its elements start at zero): they are read while the loader
    parses the new text, which waits at a gate until they are written to acct.pending.json;
    they are folded into the totals after the answer (acctstate: once, whatever dies when).

    The gate: a pipe whose read end the loader includes last (`include "/dev/fd/N"`); nft
    parses everything before it evaluates and commits, and the read ends (EOF) when the agent
    closes its end, or dies. What an element counts between its reading and the commit is the
    only loss: the rest of the reading, the loader's evaluation and the kernel's work, no
    longer the whole load. A reading that fails kills the loader before the gate: nothing
    changed."""
    handle = table_handle(host)
    settle(host, handle)  # what an earlier replacement left, before its file is reused
    gate, release = os.pipe()
    unclosed = {gate, release}

    def close(fd: int) -> None:
        unclosed.discard(fd)
        os.close(fd)

    gated = host.tx_nft.with_name("transaction.gated.nft")
    host.write_file(gated, f'include "{host.tx_nft}"\ninclude "/dev/fd/{gate}"\n')
    timing = {"started": time.monotonic()}

    def while_parsing() -> None:
        close(gate)  # the loader has its own
        keys = 0
        if handle is not None:
            counted = read_acct_kernel(host, counted_only=True)
            if table_handle(host) != handle:  # someone else replaced it: not ours to carry
                raise failed("the portal table changed while its counters were read")
            write_pending(host, handle, counted)
            keys = sum(len(c) for c in counted.values())
        timing["read"], timing["keys"] = time.monotonic(), keys
        close(release)

    try:
        result = load_committed(
            host, gated, while_parsing=while_parsing, plain=host.tx_nft, pass_fd=gate
        )
    finally:
        for fd in list(unclosed):  # those the reading did not reach (the loader is dead then)
            close(fd)
    if "read" in timing:
        host.log({"event": "traffic-read", "keys": timing["keys"],
                  "read_s": round(timing["read"] - timing["started"], 3),
                  "uncounted_s": round(time.monotonic() - timing["read"], 3)})  # fmt: skip
    if result.returncode == 0:
        host.later.append(lambda: settle_now(host))  # the fold: after the answer
    else:
        settle(host, handle)  # refused: the old table still counts them
    return result


def load_committed(
    host: Host,
    path: Path,
    *,
    while_parsing: Callable[[], None] | None = None,
    plain: Path | None = None,
    pass_fd: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """`nft -f path` by libnftables in a child (loader.py), answered as soon as the kernel
    committed the transaction, not when the child exits: after a full replacement, its exit
    waits for the kernel to free the old tables (about 0.65 s at 100,000 members), which
    changes nothing the answer depends on. The child is reaped after the answer.

    The same one transaction as `nft -f` (nft's own library): refused, nothing changed. Falls
    back to `nft -f` when libnftables cannot be loaded; a child that ends without answering
    leaves the state unknown (raises `failed` with unknown=True: the caller restores the
    point).

    `while_parsing` runs once the child started (it must open the gate `path` waits at, the
    pipe `pass_fd` the child inherits); raising, it kills the child first. `plain`: the same
    transaction without the gate, for the fallback."""
    argv = [sys.executable or "/usr/bin/python3", "-I", "-S", str(LOADER), str(path)]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv, never a shell
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=TOOL_ENV, pass_fds=() if pass_fd is None else (pass_fd,),
        )  # fmt: skip
    except OSError as exc:
        raise failed("the nft loader could not be started", str(exc)) from exc
    out, err = proc.stdout, proc.stderr
    if out is None or err is None:  # pragma: no cover - both are pipes above
        raise failed("the nft loader has no pipes")
    if while_parsing is not None:
        try:
            while_parsing()
        except BaseException:
            proc.kill()  # still at the gate: nothing committed
            proc.wait()
            out.close()
            err.close()
            raise
    ready, _, _ = select.select([out], [], [], NFT_TIMEOUT)
    line = out.readline() if ready else b""
    answered = time.monotonic() - started
    running = proc.poll() is None
    if not line:
        if not ready:
            proc.kill()
        code = proc.wait()
        stderr = err.read().decode("utf-8", "replace")
        out.close()
        err.close()
        if code == loader.NO_LIBRARY:
            host.log({"event": "nft-loader-fallback", "detail": stderr.strip()[-300:]})
            return run(["nft", "-f", str(plain or path)])
        raise failed("the nft loader ended without an answer" + ("" if ready else " (timed out)"),
                     f"exit {code}: {stderr.strip()[-2000:]}", artefact="nft",
                     unknown=True)  # fmt: skip
    try:
        answer = json.loads(line)
        rc, error = int(answer["rc"]), str(answer["error"])
    except (ValueError, KeyError, TypeError) as exc:
        raise failed("the nft loader's answer does not parse", line[-300:].decode("utf-8", "replace"),
                     artefact="nft", unknown=True) from exc  # fmt: skip
    host.log({"event": "nft-full-load", "rc": rc, "s": round(answered, 3),
              "loader_running_at_answer": running})  # fmt: skip
    if rc == 0:
        threading.Thread(target=_reap, args=(host, proc, started), daemon=True).start()
    else:  # refused: the kernel kept the old tables, there is nothing to free: the child is
        _reap(host, proc, started)  # gone at once, and its exit is logged before the answer's
    return subprocess.CompletedProcess(["nft", "-f", str(path)], rc, "", error)


def _reap(host: Host, proc: subprocess.Popen[bytes], started: float) -> None:
    """Wait for the loader's exit (the kernel freeing the replaced tables) off the answer's
    path, and log how long it took."""
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    host.log({"event": "nft-loader-exit", "code": proc.returncode,
              "s": round(time.monotonic() - started, 3)})  # fmt: skip


def check(host: Host, text: str, *, replace: bool) -> subprocess.CompletedProcess[str]:
    """`nft -c` of exactly the transaction `load` would run (the text goes to upload.nft)."""
    host.write_file(host.upload_nft, text)
    host.check_text = text
    return nft_file(host, transaction(host, [host.upload_nft], replace=replace), check_only=True)


def load(host: Host, text: str, *, replace: bool) -> subprocess.CompletedProcess[str]:
    """Load a full text or an increment in one transaction; keep the record of the text that
    built the tables (a full text becomes the base, an increment goes to the journal)."""
    if not replace:
        return load_increment(host, text)[0]
    if host.check_text is not text or not host.upload_nft.exists():  # check wrote it already
        host.write_file(host.upload_nft, text)
    host.check_text = None
    result = nft_file(host, transaction(host, [host.upload_nft], replace=True), check_only=False)
    if result.returncode == 0:
        host.set_nft_current(host.upload_nft, move=True)
    return result


def load_increment(host: Host, text: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """An increment: element statements as one netlink batch when `elements` encodes them
    all, otherwise `nft -f -` with the text on a pipe. Answers (the result, "netlink"|"nft");
    raises `failed` when the kernel's answer to a batch is lost (state unknown).

    The counters of the accounting elements it deletes (a device or member removed) are read
    right before and carried once the load succeeded (`traffic.read_removed`): what the device
    counted since the portal's last reading is not lost with its element."""
    removed = read_removed(host, text)
    result, how = _load_increment(host, text)
    if removed and result.returncode == 0:
        carry_counters(host, removed)
    return result, how


def _load_increment(host: Host, text: str) -> tuple[subprocess.CompletedProcess[str], str]:
    begun = host.journal_begin(text)
    how = "nft"
    try:
        nl = host.netlink()
        batch = elements.plan(nl, text)
        how = "netlink"
        elements.send(nl, batch)
        result = subprocess.CompletedProcess(["netlink"], 0, "", "")
    except elements.Refused as exc:
        result = subprocess.CompletedProcess(["netlink"], 1, "", exc.detail)
    except elements.Unknown as exc:
        host.drop_netlink()
        host.journal_end(begun, loaded=False)
        host.set_nft_current(None)  # not known what runs: the next point is a dump
        raise failed("the kernel did not answer the element batch", str(exc),
                     artefact="nft", unknown=True) from exc  # fmt: skip
    except (elements.NotHandled, NetlinkError, OSError) as exc:
        if not isinstance(exc, elements.NotHandled):
            host.drop_netlink()
        if how == "netlink" and not isinstance(exc, elements.NotHandled):
            host.journal_end(begun, loaded=False)
            host.set_nft_current(None)
            raise failed("sending the element batch failed", str(exc), artefact="nft",
                         unknown=True) from exc  # fmt: skip
        how = "nft"
        result = run(["nft", "-f", "-"], stdin=text)
    host.journal_end(begun, loaded=result.returncode == 0)
    host.later.append(host.compact_nft_journal)  # when long, after the answer
    return result, how


def restore(host: Host, point: Path, journal_bytes: int) -> None:
    """Replace all portal tables by the point's text (its base + the first `journal_bytes` of
    its journal), in one transaction; that text becomes the record."""
    base = point / "nft.nft"
    prefix = b""
    bodies = [base]
    if journal_bytes:
        with open(point / "nft.journal", "rb") as fh:
            prefix = fh.read(journal_bytes)
        host.write_file(host.upload_nft, prefix.decode("utf-8"))
        host.check_text = None
        bodies.append(host.upload_nft)
    result = nft_file(host, transaction(host, bodies, replace=True), check_only=False)
    if result.returncode != 0:
        raise failed("restoring the rollback point failed", result.stderr.strip())
    host.set_nft_current(base, prefix)
