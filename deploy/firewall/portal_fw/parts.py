"""Digest parts of the portal tables, read from the kernel over netlink.

Parts hash the kernel's raw attributes without what is not content: handles, use counts,
counters, a quota's consumption, expiry timers; anonymous sets are replaced by their content.
A set/map part is its declaration + the multiset sum of its elements + their count, so equal
state gives an equal part whatever the insertion history (see deploy/firewall/README.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from .common import sha256
from .netlink import (
    CHAIN_VOLATILE,
    FLOWTABLE_VOLATILE,
    MOD256,
    NFPROTO,
    NFPROTO_NAMES,
    NFT_MSG_GETCHAIN,
    NFT_MSG_GETFLOWTABLE,
    NFT_MSG_GETOBJ,
    NFT_MSG_GETRULE,
    NFT_MSG_GETSET,
    NFT_MSG_GETSETELEM,
    NFT_MSG_GETTABLE,
    NFT_OBJECT_COUNTER,
    NFT_OBJECT_QUOTA,
    NFT_SET_ANONYMOUS,
    NFT_SET_EVAL,
    NFT_SET_MAP,
    NFT_SET_OBJECT,
    NFTA_CHAIN_NAME,
    NFTA_CHAIN_TABLE,
    NFTA_EXPR_DATA,
    NFTA_EXPR_NAME,
    NFTA_FLOWTABLE_TABLE,
    NFTA_LIST_ELEM,
    NFTA_OBJ_DATA,
    NFTA_OBJ_TABLE,
    NFTA_OBJ_TYPE,
    NFTA_RULE_CHAIN,
    NFTA_RULE_EXPRESSIONS,
    NFTA_RULE_TABLE,
    NFTA_SET_ELEM_LIST_ELEMENTS,
    NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_EXPR,
    NFTA_SET_EXPRESSIONS,
    NFTA_SET_FLAGS,
    NFTA_SET_NAME,
    NFTA_SET_TABLE,
    NFTA_TABLE_NAME,
    OBJ_VOLATILE,
    RULE_KEPT,
    SET_VOLATILE,
    TABLE_VOLATILE,
    DumpInterrupted,
    NftNetlink,
    element_payloads,
    multiset_sum,
    nla,
    nla_be32,
    nla_encode,
    nla_first,
    nla_list,
    nla_str,
    nla_text,
)


def _strip_expr(payload: bytes, anonymous: dict[str, bytes]) -> bytes:
    """One expression (NFTA_EXPR_NAME + NFTA_EXPR_DATA) without its state: counter values, a
    quota's consumption and depletion flag, `last`'s timestamp; anonymous set names replaced
    by their content (their names, __set%d, depend on the history)."""
    attrs = dict(nla_list(payload))
    name = nla_text(attrs.get(NFTA_EXPR_NAME)) or ""
    data = attrs.get(NFTA_EXPR_DATA)
    out: list[tuple[int, bytes]] = [(NFTA_EXPR_NAME, name.encode())]
    if data is None or name in {"counter", "last"}:
        return nla_encode(out)
    kept: list[tuple[int, bytes]] = []
    for attr_type, value in nla_list(data):
        if name == "quota":
            if attr_type in {3, 4}:  # PAD CONSUMED
                continue
            if attr_type == 2:  # FLAGS: only INV is configuration (DEPLETED is state)
                value = (nla_be32(value) & 1).to_bytes(4, "big")
        elif name == "lookup" and attr_type in {1, 4}:  # SET SET_ID
            if attr_type == 4:
                continue
            value = anonymous.get(nla_text(value) or "", value)
        elif name == "dynset":
            if attr_type in {2, 8}:  # SET_ID PAD
                continue
            if attr_type == 1:
                value = anonymous.get(nla_text(value) or "", value)
            elif attr_type == 7:  # EXPR
                value = _strip_expr(value, anonymous)
            elif attr_type == 10:  # EXPRESSIONS
                value = _strip_exprs(value, anonymous)
        elif name == "objref" and attr_type in {4, 5}:  # SET_NAME SET_ID
            if attr_type == 5:
                continue
            value = anonymous.get(nla_text(value) or "", value)
        kept.append((attr_type, value))
    out.append((NFTA_EXPR_DATA, nla_encode(kept)))
    return nla_encode(out)


def _strip_exprs(payload: bytes, anonymous: dict[str, bytes]) -> bytes:
    return nla_encode(
        (NFTA_LIST_ELEM, _strip_expr(value, anonymous)) for _, value in nla_list(payload)
    )


class RawTable:
    """One portal table as the kernel dumps it."""

    def __init__(self, family: int, name: str, attrs: list[tuple[int, bytes]]):
        self.family, self.name, self.attrs = family, name, attrs

    @property
    def where(self) -> str:
        return f"nft:{NFPROTO_NAMES.get(self.family, self.family)} {self.name}"


def _canon(attrs: Iterable[tuple[int, bytes]], volatile: frozenset[int]) -> bytes:
    return nla_encode((t, v) for t, v in attrs if t not in volatile)


def _set_declaration(attrs: list[tuple[int, bytes]], anonymous: dict[str, bytes]) -> bytes:
    kept: list[tuple[int, bytes]] = []
    for attr_type, value in attrs:
        if attr_type in SET_VOLATILE:
            continue
        if attr_type == NFTA_SET_EXPR:
            value = _strip_expr(value, anonymous)
        elif attr_type == NFTA_SET_EXPRESSIONS:
            value = _strip_exprs(value, anonymous)
        kept.append((attr_type, value))
    return nla_encode(kept)


def _set_kind(attrs: dict[int, bytes]) -> str:
    return "map" if nla_be32(attrs.get(NFTA_SET_FLAGS)) & (NFT_SET_MAP | NFT_SET_OBJECT) else "set"


def netlink_set_digest(
    nl: NftNetlink, table: RawTable, attrs: list[tuple[int, bytes]]
) -> tuple[bytes, int, int]:
    """(declaration bytes, multiset sum, count) of one set: its elements dumped by netlink.
    A dynamic set (the conntrack quotas) is filled by the data path, not by the portal: its
    declaration is content, its elements are not."""
    by_type = dict(attrs)
    name = nla_text(by_type.get(NFTA_SET_NAME)) or ""
    if nla_be32(by_type.get(NFTA_SET_FLAGS)) & NFT_SET_EVAL:
        return _set_declaration(attrs, {}), 0, 0
    request = nla_str(NFTA_SET_ELEM_LIST_TABLE, table.name) + nla_str(NFTA_SET_ELEM_LIST_SET, name)
    total = count = 0
    for _family, payload in nl.request(NFT_MSG_GETSETELEM, table.family, request):
        elements = nla_first(payload, NFTA_SET_ELEM_LIST_ELEMENTS)
        if elements is None:
            continue
        canon = element_payloads(elements)
        total += multiset_sum(canon)
        count += len(canon)
    return _set_declaration(attrs, {}), total % MOD256, count


def netlink_set_part(declaration: bytes, total: int, count: int) -> str:
    return set_part_from(hashlib.sha256(declaration).hexdigest(), total, count)


def set_part_from(declaration_sha: str, total: int, count: int) -> str:
    """A set/map part: sha256 of its declaration's hash, the multiset sum and the count (what
    the state records per set, so that element events can update it without a dump)."""
    return sha256(f"{declaration_sha}\n{total % MOD256:064x}\n{count}")


def set_record(declaration: bytes, total: int, count: int, flags: int) -> list[Any]:
    return [hashlib.sha256(declaration).hexdigest(), f"{total % MOD256:064x}", count, flags]


def netlink_tables(nl: NftNetlink, prefix: str) -> list[RawTable]:
    tables: list[RawTable] = []
    for family, payload in nl.request(NFT_MSG_GETTABLE, 0):
        attrs = nla_list(payload)
        name = nla_text(dict(attrs).get(NFTA_TABLE_NAME)) or ""
        if name.startswith(prefix):
            tables.append(RawTable(family, name, attrs))
    return tables


def netlink_sets(nl: NftNetlink, table: RawTable) -> list[list[tuple[int, bytes]]]:
    return [
        attrs
        for attrs in nl.dump(NFT_MSG_GETSET, table.family, nla_str(NFTA_SET_TABLE, table.name))
        if nla_text(dict(attrs).get(NFTA_SET_TABLE)) == table.name
    ]


def netlink_table_parts(
    nl: NftNetlink, table: RawTable, sets: dict[str, list[Any]]
) -> dict[str, str]:
    """The digest parts of one table: each named set/map, each chain (declaration + rules in
    order), the table itself (flags, userdata, named objects, flowtables). ``sets`` receives
    each named set's record (declaration hash, multiset sum, count, flags)."""
    parts: dict[str, str] = {}
    anonymous: dict[str, bytes] = {}
    for attrs in netlink_sets(nl, table):
        by_type = dict(attrs)
        name = nla_text(by_type.get(NFTA_SET_NAME)) or ""
        declaration, total, count = netlink_set_digest(nl, table, attrs)
        if nla_be32(by_type.get(NFTA_SET_FLAGS)) & NFT_SET_ANONYMOUS:
            without_name = _canon(nla_list(declaration), frozenset({NFTA_SET_NAME}))
            anonymous[name] = b"anon:" + netlink_set_part(without_name, total, count).encode()
        else:
            key = f"{table.where} {_set_kind(by_type)} {name}"
            parts[key] = netlink_set_part(declaration, total, count)
            sets[key] = set_record(declaration, total, count, nla_be32(by_type.get(NFTA_SET_FLAGS)))
    rules: dict[str, list[bytes]] = {}
    for attrs in nl.dump(NFT_MSG_GETRULE, table.family, nla_str(NFTA_RULE_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_RULE_TABLE)) != table.name:
            continue
        rule = [
            (t, _strip_exprs(v, anonymous) if t == NFTA_RULE_EXPRESSIONS else v)
            for t, v in attrs
            if t in RULE_KEPT
        ]
        rules.setdefault(nla_text(by_type.get(NFTA_RULE_CHAIN)) or "", []).append(nla_encode(rule))
    for attrs in nl.dump(NFT_MSG_GETCHAIN, table.family, nla_str(NFTA_CHAIN_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_CHAIN_TABLE)) != table.name:
            continue
        name = nla_text(by_type.get(NFTA_CHAIN_NAME)) or ""
        body = nla(1, _canon(attrs, CHAIN_VOLATILE)) + b"".join(
            nla(2, rule) for rule in rules.get(name, [])
        )
        parts[f"{table.where} chain {name}"] = hashlib.sha256(body).hexdigest()
    items = [nla(1, _canon(table.attrs, TABLE_VOLATILE))]
    objects: list[bytes] = []
    for attrs in nl.dump(NFT_MSG_GETOBJ, table.family, nla_str(NFTA_OBJ_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_OBJ_TABLE)) != table.name:
            continue
        kind = nla_be32(by_type.get(NFTA_OBJ_TYPE))
        kept: list[tuple[int, bytes]] = []
        for attr_type, value in attrs:
            if attr_type in OBJ_VOLATILE or (
                attr_type == NFTA_OBJ_DATA and kind == NFT_OBJECT_COUNTER
            ):
                continue
            if attr_type == NFTA_OBJ_DATA and kind == NFT_OBJECT_QUOTA:
                value = _strip_expr(nla(1, b"quota") + nla(2, value), {})
            kept.append((attr_type, value))
        objects.append(nla(2, nla_encode(kept)))
    for attrs in nl.dump(
        NFT_MSG_GETFLOWTABLE, table.family, nla_str(NFTA_FLOWTABLE_TABLE, table.name)
    ):
        if nla_text(dict(attrs).get(NFTA_FLOWTABLE_TABLE)) == table.name:
            objects.append(nla(3, _canon(attrs, FLOWTABLE_VOLATILE)))
    parts[f"{table.where} table"] = hashlib.sha256(b"".join(items + sorted(objects))).hexdigest()
    return parts


def netlink_parts(prefix: str, attempts: int = 3) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """Digest parts of every portal table, read in one rule-set generation (retried when the
    generation moves or a dump is interrupted)."""
    with NftNetlink() as nl:
        for attempt in range(attempts):
            try:
                before = nl.generation()
                parts: dict[str, str] = {}
                sets: dict[str, list[Any]] = {}
                for table in netlink_tables(nl, prefix):
                    parts.update(netlink_table_parts(nl, table, sets))
                if nl.generation() == before:
                    return parts, sets
            except DumpInterrupted:
                if attempt == attempts - 1:
                    raise
        raise DumpInterrupted(f"the rule set kept changing during {attempts} dumps")


def netlink_set_parts(
    prefix: str, wanted: set[tuple[str, str, str]], sets: dict[str, list[Any]]
) -> dict[str, str] | None:
    """Parts of just the named sets/maps ((family, table, set)), their records into ``sets``;
    None when one is missing or anonymous (then the caller reads everything)."""
    parts: dict[str, str] = {}
    with NftNetlink() as nl:
        by_table: dict[tuple[str, str], set[str]] = {}
        for family, wanted_table, name in wanted:
            by_table.setdefault((family, wanted_table), set()).add(name)
        for (family, table_name), names in sorted(by_table.items()):
            if family not in NFPROTO or not table_name.startswith(prefix):
                return None
            table = RawTable(NFPROTO[family], table_name, [])
            found = {
                nla_text(dict(attrs).get(NFTA_SET_NAME)): attrs for attrs in netlink_sets(nl, table)
            }
            for name in sorted(names):
                attrs = found.get(name)
                if attrs is None or nla_be32(dict(attrs).get(NFTA_SET_FLAGS)) & NFT_SET_ANONYMOUS:
                    return None
                declaration, total, count = netlink_set_digest(nl, table, attrs)
                key = f"{table.where} {_set_kind(dict(attrs))} {name}"
                parts[key] = netlink_set_part(declaration, total, count)
                flags = nla_be32(dict(attrs).get(NFTA_SET_FLAGS))
                sets[key] = set_record(declaration, total, count, flags)
    return parts
