"""nft: check and load one transaction of the portal tables; read what they hold.

A full load (``replace``) deletes every loaded ``portal_*`` table and loads the text in ONE
transaction, checked first with ``nft -c`` of that very transaction. An element-only increment
is loaded without a separate check: the kernel's transaction is atomic and refuses as a whole,
so a refused increment leaves the tables as they were.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .common import failed, run
from .host import Host


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


def transaction(host: Host, body_file: Path, *, replace: bool) -> str:
    lines = []
    if replace:
        lines += [f"delete table {family} {name}" for family, name in portal_tables(host)]
    lines.append(f'include "{body_file}"')
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
    return nft_file(host, transaction(host, host.upload_nft, replace=replace), check_only=True)


def load(host: Host, text: str, *, replace: bool) -> subprocess.CompletedProcess[str]:
    """Load the text in one transaction and keep nft.current (the text that built the tables)."""
    host.write_file(host.upload_nft, text)
    result = nft_file(host, transaction(host, host.upload_nft, replace=replace), check_only=False)
    if result.returncode != 0:
        return result
    if replace:
        host.set_nft_current(host.upload_nft)
    elif host.nft_current_valid():
        host.set_nft_current(host.nft_current, append=text)
    else:
        host.set_nft_current(None)  # unknown base: the next rollback point is a dump
    return result


def restore(host: Host, saved_file: Path) -> None:
    """Replace all portal tables by the saved text, in one transaction."""
    result = nft_file(host, transaction(host, saved_file, replace=True), check_only=False)
    if result.returncode != 0:
        raise failed("restoring the rollback point failed", result.stderr.strip())
