"""The content digest: what actually runs, independent of order, counters and handles.

Parts: each portal nft set/map, chain and table (netlink: parts.py; `nft -j` as the fallback),
the tc text of each shaping device, each declared file. A full read after a replace; after an
element-only increment the touched sets are moved by the kernel's own element events (or
dumped again) and every other part is the recorded one, so a hand change elsewhere stays
visible.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Iterable
from typing import Any

from . import nft, tc
from .bundle import FileArtefact
from .common import JSON, HelperError, failed, run, sha256
from .host import Host
from .netlink import MOD256, NFT_SET_TIMEOUT, DumpInterrupted, ElementEvents, NetlinkError
from .parts import netlink_parts, netlink_set_parts, set_part_from
from .scope import element_only

DIGEST_SOURCES = ("auto", "netlink", "nft")


# ---- the fallback: `nft -j list table` (slow on big tables; other hashes than netlink's)
def canon_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def strip_volatile(obj: Any) -> Any:
    """A JSON object of `nft -j` without handles, counter values, quota use and expiry times;
    anonymous set contents inside rules are sorted."""
    if isinstance(obj, dict):
        out: JSON = {}
        for key, value in obj.items():
            if key in {"handle", "expires", "used", "used_unit"}:
                continue
            if key == "counter" and isinstance(value, dict) and set(value) <= {"packets", "bytes"}:
                out[key] = None  # the rule/element counts; what it counted is not content
                continue
            if key == "set" and isinstance(value, list):
                out[key] = sorted((strip_volatile(v) for v in value), key=canon_json)
                continue
            out[key] = strip_volatile(value)
        return out
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj


def canon_element(element: Any) -> str:
    """The canonical text of one set/map element as `nft -j` prints it, whether it comes from a
    full listing (`list table`/`list set`) or from `get element`."""
    return canon_json(strip_volatile(element))


def element_hash(canon: str) -> int:
    return int.from_bytes(hashlib.sha256(canon.encode()).digest(), "big")


def multiset_digest(elements: Iterable[Any]) -> tuple[int, int]:
    """(sum of sha256(canonical element) mod 2**256, count): order-independent, and updatable
    element by element (add the hash of an added element, subtract that of a removed one)."""
    total = 0
    count = 0
    for element in elements:
        total += element_hash(canon_element(element))
        count += 1
    return total % MOD256, count


def set_part(declaration: JSON, total: int, count: int) -> str:
    return sha256(f"{canon_json(declaration)}\n{total:064x}\n{count}")


def nft_parts(tables_json: Iterable[JSON]) -> dict[str, str]:
    """Digest parts of the portal nft tables from `nft -j list table` outputs."""
    parts: dict[str, str] = {}
    for listing in tables_json:
        chains: JSON = {}
        rules: dict[str, list[Any]] = {}
        table_items: list[Any] = []
        for item in listing.get("nftables", []):
            (kind, body), *_ = item.items()
            if kind == "metainfo":
                continue
            where = f"nft:{body.get('family')} {body.get('table', body.get('name'))}"
            if kind == "table":
                table_items.append(strip_volatile(body))
            elif kind == "chain":
                chains[body["name"]] = strip_volatile(body)
            elif kind == "rule":
                rules.setdefault(body["chain"], []).append(strip_volatile(body))
            elif kind in {"set", "map"}:
                declaration = strip_volatile({k: v for k, v in body.items() if k != "elem"})
                dynamic = "dynamic" in (body.get("flags") or [])  # filled by the data path
                total, count = multiset_digest([] if dynamic else body.get("elem", []))
                parts[f"{where} {kind} {body['name']}"] = set_part(declaration, total, count)
            else:  # flowtables, named counters/quotas/ct objects: declaration only
                body = {k: v for k, v in body.items() if k not in {"packets", "bytes"}}
                table_items.append({kind: strip_volatile(body)})
        for name, chain in chains.items():
            where = f"nft:{chain.get('family')} {chain.get('table')}"
            parts[f"{where} chain {name}"] = sha256(canon_json([chain, rules.get(name, [])]))
        if table_items:
            first = table_items[0]
            where = f"nft:{first.get('family')} {first.get('name')}"
            parts[f"{where} table"] = sha256(canon_json(table_items))
    return parts


def digest_total(parts: dict[str, str]) -> str:
    return sha256("".join(f"{key}\t{value}\n" for key, value in sorted(parts.items())))


# ---- the digest of a host


def nft_json_parts(host: Host) -> dict[str, str]:
    """The fallback: digest parts from `nft -j list table` (slow on big tables: nft 1.0.6
    loads its whole cache; parts differ from the netlink ones, never mix the two)."""
    listings = []
    for family, name in nft.portal_tables(host):
        result = run(["nft", "-j", "list", "table", family, name])
        if result.returncode != 0:
            raise failed(f"nft -j list table {family} {name} failed", result.stderr)
        listings.append(json.loads(result.stdout or "{}"))
    return nft_parts(listings)


def nft_digest_parts(
    host: Host,
) -> tuple[dict[str, str], dict[str, list[Any]], str, str | None]:
    """(parts, set records, source, why the netlink reader was not used): netlink unless it
    fails (old kernel, no permission) or the host forces `--digest-source nft`."""
    fallback = None
    if host.digest_source != "nft":
        try:
            return (*netlink_parts(host.prefix), "netlink", None)
        except (OSError, NetlinkError, DumpInterrupted, struct.error, ValueError) as exc:
            if host.digest_source == "netlink":
                raise failed(f"netlink dump failed: {exc}") from exc
            fallback = f"netlink: {exc}"
    return nft_json_parts(host), {}, "nft", fallback


def tc_part(dev: str) -> str:
    return sha256(tc.canon(dev))


def file_part(art: FileArtefact) -> str:
    try:
        return hashlib.sha256(art.path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return "absent"


def compute_digest(host: Host) -> JSON:
    """The content digest of everything the helper manages, read from what actually runs."""
    started = time.monotonic()
    parts, sets, source, fallback = nft_digest_parts(host)
    nft_seconds = time.monotonic() - started
    for dev in sorted(tc.devices(host.read_tc_current())):
        parts[f"tc:{dev}"] = tc_part(dev)
    for name, art in sorted(host.artefacts.items()):
        parts[f"file:{name}"] = file_part(art)
    answer = {
        "total": digest_total(parts),
        "parts": dict(sorted(parts.items())),
        "source": source,
        "mode": "full",
        "read": sorted(parts),
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "_sets": sets,  # recorded in the state, not answered (see public_digest)
    }
    if fallback:
        answer["fallback"] = fallback
    return answer


def public_digest(digest: JSON) -> JSON:
    return {k: v for k, v in digest.items() if not k.startswith("_")}


def recorded_digest(digest: JSON) -> JSON:
    """What state.json keeps of a digest: the parts and, per set, what the next increment
    needs to move its multiset sum by the kernel's element events."""
    return {
        "total": digest.get("total"),
        "parts": digest.get("parts"),
        "source": digest.get("source"),
        "sets": digest.get("_sets") or {},
    }


def _events_update(
    host: Host,
    deltas: dict[tuple[str, str, str], list[int]],
    touched: set[tuple[str, str, str]],
    previous_sets: dict[str, list[Any]],
) -> tuple[dict[str, str], dict[str, list[Any]]] | None:
    """New parts/records of the sets the element events moved (and of the touched ones that
    did not move); None when an event names a set the state does not know or one whose
    elements can be updated in place (timeouts)."""
    parts: dict[str, str] = {}
    sets: dict[str, list[Any]] = {}
    for family, table, name in set(deltas) | touched:
        key = next(
            (k for k in (f"nft:{family} {table} set {name}", f"nft:{family} {table} map {name}")
             if k in previous_sets),
            None,
        )  # fmt: skip
        if key is None or not table.startswith(host.prefix):
            return None
        declaration_sha, total_hex, count, flags = previous_sets[key]
        if flags & NFT_SET_TIMEOUT:
            return None  # an `add` may refresh an element's timeout: an event, no new element
        dsum, dcount = deltas.get((family, table, name), (0, 0))
        count += dcount
        if count < 0:
            return None
        total = (int(total_hex, 16) + dsum) % MOD256
        parts[key] = set_part_from(declaration_sha, total, count)
        sets[key] = [declaration_sha, f"{total:064x}", count, flags]
    return parts, sets


def incremental_digest(
    host: Host, artefacts: JSON, previous: JSON | None, events: ElementEvents | None = None
) -> JSON | None:
    """The digest after an apply-bundle that only added/deleted elements (or touched no nft):
    the touched sets/maps are moved by the kernel's element events (``events``, opened before
    the load) or, failing that, dumped again (netlink); tc devices and files in the bundle are
    read; every other part is the one recorded after the previous apply. None: read all."""
    started = time.monotonic()
    previous = previous or {}
    previous_parts = previous.get("parts") or {}
    previous_sets = previous.get("sets") or {}
    if not previous_parts or previous.get("source") != "netlink":
        return None
    if not previous.get("total") or host.digest_source == "nft":
        return None
    nft = artefacts.get("nft")
    touched: set[tuple[str, str, str]] = set()
    flushes = False
    if nft is not None:
        if nft["mode"] != "increment":
            return None
        found = element_only(nft["text"])
        if found is None:
            return None
        touched, flushes = found
    parts = {k: v for k, v in previous_parts.items() if k.startswith("nft:")}
    sets = dict(previous_sets)
    read: list[str] = []
    via = "none"
    moved = None
    if events is not None and touched and not flushes:
        deltas = events.collect()
        if deltas is not None:
            moved = _events_update(host, deltas, touched, previous_sets)
            via = "events"
    if moved is None and touched:
        via = "dump"
        moved_sets: dict[str, list[Any]] = {}
        try:
            fresh = netlink_set_parts(host.prefix, touched, moved_sets)
        except (OSError, NetlinkError, DumpInterrupted, struct.error, ValueError):
            return None
        if fresh is None:
            return None
        moved = fresh, moved_sets
    if moved is not None:
        fresh, moved_sets = moved
        if not set(fresh) <= set(parts):
            return None
        parts.update(fresh)
        sets.update(moved_sets)
        read += fresh
    nft_seconds = time.monotonic() - started
    tc_touched = tc.devices(artefacts["tc"]["text"]) if "tc" in artefacts else set()
    if artefacts.get("tc", {}).get("mode", "increment") == "increment":
        # The shaping devices are the recorded ones plus those the increment names (reading
        # them from tc.current is a pass over a 24,000-class batch: ~0.2 s at 20,000 members).
        shaping = {k[3:] for k in previous_parts if k.startswith("tc:")} | tc_touched
    else:
        shaping = tc.devices(host.read_tc_current())
    for dev in sorted(shaping):
        key = f"tc:{dev}"
        if dev in tc_touched or key not in previous_parts:
            parts[key] = tc_part(dev)
            read.append(key)
        else:
            parts[key] = previous_parts[key]
    for name, art in sorted(host.artefacts.items()):
        key = f"file:{name}"
        if name in artefacts or key not in previous_parts:
            parts[key] = file_part(art)
            read.append(key)
        else:
            parts[key] = previous_parts[key]
    return {
        "total": digest_total(parts),
        "parts": dict(sorted(parts.items())),
        "source": "netlink",
        "mode": "incremental",
        "read": sorted(read),
        "via": via,
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "_sets": sets,
    }


def open_element_events(host: Host, artefacts: JSON, previous: JSON | None) -> ElementEvents | None:
    """The element-event listener for an element-only nft increment whose previous digest
    has set records (None otherwise, or when the socket cannot be had)."""
    nft = artefacts.get("nft")
    if nft is None or nft["mode"] != "increment" or host.digest_source == "nft":
        return None
    if not (previous or {}).get("sets") or (previous or {}).get("source") != "netlink":
        return None
    found = element_only(nft["text"])
    if found is None or found[1] or not found[0]:
        return None
    try:
        return host.element_events()
    except OSError:
        host.drop_netlink()
        return None


def digest_or_error(host: Host) -> JSON:
    try:
        return compute_digest(host)
    except HelperError as exc:
        return {"total": None, "parts": {}, "error": exc.message, "detail": exc.detail}
