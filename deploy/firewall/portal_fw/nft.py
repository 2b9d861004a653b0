"""nft: check and load one transaction of the portal tables; read what they hold.

A full load (``replace``) deletes every loaded ``portal_*`` table and loads the text in ONE
transaction, checked first with ``nft -c`` of that very transaction. An element-only increment
is loaded without a separate check, as one netlink batch (elements.py; no nft process) or, for
what that does not encode, by ``nft -f -``: the kernel's transaction is atomic and refuses as a
whole, so a refused increment leaves the tables as they were.

What built the tables is kept as a base (nft.current: the last full load or restore) and a
journal of the increments since (nft.journal), so a change appends a few hundred bytes instead
of rewriting megabytes; the rollback point links both and records the journal's length.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import elements
from .common import failed, run
from .host import Host
from .netlink import NetlinkError


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


def counted_elements(host: Host, name: str, timeout: float) -> dict[str, tuple[int, int]] | None:
    """{element: (packets, bytes)} of a counted set of the portal's `fw` table, by `nft -j`
    (None: no such set, or nft failed)."""
    result = run(["nft", "-j", "list", "set", "inet", f"{host.prefix}fw", name], timeout=timeout)
    if result.returncode != 0:
        return None
    try:
        items = json.loads(result.stdout).get("nftables", [])
    except ValueError:
        return None
    counted: dict[str, tuple[int, int]] = {}
    for item in items:
        for elem in (item.get("set") or {}).get("elem", []):
            e = elem.get("elem") if isinstance(elem, dict) else None
            if isinstance(e, dict) and isinstance(e.get("val"), str):
                c = e.get("counter") or {}
                counted[e["val"]] = (int(c.get("packets") or 0), int(c.get("bytes") or 0))
    return counted


def transaction(host: Host, body_files: list[Path], *, replace: bool) -> str:
    lines = []
    if replace:
        lines += [f"delete table {family} {name}" for family, name in portal_tables(host)]
    lines += [f'include "{body}"' for body in body_files]
    return "\n".join(lines) + "\n"


def nft_file(host: Host, tx: str, *, check_only: bool) -> subprocess.CompletedProcess[str]:
    """`nft -c -f` or `nft -f` of the transaction `tx` (written to transaction.nft)."""
    from .traffic import carry_counters, read_acct_kernel

    host.write_file(host.tx_nft, tx)
    if check_only:
        return run(["nft", "-c", "-f", str(host.tx_nft)])
    replacing = tx.startswith("delete table ")
    counted = read_acct_kernel(host) if replacing else None
    result = run(["nft", "-f", str(host.tx_nft)])
    if counted and result.returncode == 0:
        # The replaced tables' element counters are gone (the new text starts at zero): keep
        # what they had counted.
        carry_counters(host, counted)
    return result


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
    raises `failed` when the kernel's answer to a batch is lost (state unknown)."""
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
