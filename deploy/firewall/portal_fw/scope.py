"""Scope checks of nft text: it may only touch the portal's own tables.

The text is split into top-level statements (comments, strings and braces honoured); each must
name a table whose name starts with the host's prefix (``portal_``). No ``flush ruleset``, no
``include`` (anywhere), no other tables, no tables by handle. `element_only` tells an increment
that only adds or deletes set/map elements, which the agent applies without an ``nft -c`` pass.
"""

from __future__ import annotations

import re

from .common import refused

FAMILIES = frozenset({"ip", "ip6", "inet", "arp", "bridge", "netdev"})
NFT_OBJECTS = frozenset(
    {"table", "chain", "set", "map", "element", "rule", "flowtable", "counter", "quota", "limit",
     "secmark", "synproxy", "ct"}
)  # fmt: skip
NFT_CT_OBJECTS = frozenset({"helper", "timeout", "expectation"})
NFT_WRITE_COMMANDS = frozenset({"add", "create", "delete", "destroy", "flush", "insert", "replace"})
ELEMENT_STATEMENTS = frozenset({"add", "create", "delete", "destroy"})
DEFINES = frozenset({"define", "redefine", "undefine"})
NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Inside a block the splitter keeps no token, and only one could matter: `include`. Newlines,
# `;` and comments inside a block neither end nor join a token there (the loop below drops
# them), so a token `include` needs these letters in a row with only those in between. A text
# where nothing like that occurs anywhere (strings and comments included) holds no such token,
# and then a block's contents are skipped from brace, quote or comment to the next (a full
# rule set of 100,000 members: 52 MB, 7 s a character at a time; issue 26).
_GAP = r"(?:[\n;]|#[^\n]*)*"
INCLUDE_LIKE = re.compile(_GAP.join("include"))
BLOCK_MARK = re.compile(r'[{}"#]')


def statements(text: str) -> list[tuple[int, list[str]]]:
    """Split nft text into top-level statements: (line number, tokens outside any braces).

    Tokens inside ``{ ... }`` blocks are dropped (a table block cannot name another table);
    comments and quoted strings are honoured. Inside blocks the text is skipped from one brace,
    quote or comment to the next unless something like ``include`` occurs (INCLUDE_LIKE): the
    same statements, lines and refusals as a character at a time, in a fraction of the time.
    """
    skip_blocks = INCLUDE_LIKE.search(text) is None
    find_mark = BLOCK_MARK.search
    statements: list[tuple[int, list[str]]] = []
    tokens: list[str] = []
    start_line = 1
    line = 1
    depth = 0
    i = 0
    n = len(text)
    current = ""

    def flush_token() -> None:
        nonlocal current
        if current:
            if depth == 0:
                tokens.append(current)
            elif current == "include":  # nft also accepts include inside blocks
                raise refused(f"line {line}: 'include' is not allowed")
            current = ""

    def end_statement() -> None:
        nonlocal tokens, start_line
        flush_token()
        if depth == 0 and tokens:
            statements.append((start_line, tokens))
            tokens = []
        if depth == 0:
            start_line = line

    while i < n:
        if depth and skip_blocks:
            mark = find_mark(text, i)
            j = mark.start() if mark else n
            line += text.count("\n", i, j)
            i = j
            if i == n:
                break
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            flush_token()
            i += 2
            line += 1
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\n":
                    raise refused(f"line {line}: unterminated string")
                j += 1
            if j >= n:
                raise refused(f"line {line}: unterminated string")
            current += text[i : j + 1]
            i = j + 1
            continue
        if ch == "{":
            flush_token()
            if depth == 0 and not tokens:
                raise refused(f"line {line}: block without a statement")
            depth += 1
            i += 1
            continue
        if ch == "}":
            flush_token()
            depth -= 1
            if depth < 0:
                raise refused(f"line {line}: unbalanced '}}'")
            i += 1
            if depth == 0:
                end_statement()
            continue
        if ch in "\n;":
            if depth == 0:
                end_statement()
            if ch == "\n":
                line += 1
                if depth == 0 and not tokens:
                    start_line = line
            i += 1
            continue
        if ch in " \t\r":
            flush_token()
            i += 1
            continue
        current += ch
        i += 1
    end_statement()
    if depth != 0:
        raise refused("unbalanced '{' at end of input")
    return statements


def unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return token[1:-1]
    return token


def check_scope(text: str, prefix: str) -> None:
    """Raise a refusal unless every top-level statement only touches tables named prefix*."""
    if "\x00" in text:
        raise refused("NUL byte in input")
    for line, tokens in statements(text):
        head = tokens[0]
        if head in DEFINES:
            continue
        if head == "include":
            raise refused(f"line {line}: 'include' is not allowed")
        if head == "table":
            rest = tokens[1:]
        elif head in NFT_WRITE_COMMANDS:
            if len(tokens) < 2 or tokens[1] not in NFT_OBJECTS:
                what = " ".join(tokens[:2])
                raise refused(f"line {line}: '{what}' is not allowed (only portal tables)")
            rest = tokens[2:]
            if tokens[1] == "ct":
                if not rest or rest[0] not in NFT_CT_OBJECTS:
                    raise refused(f"line {line}: unknown ct object")
                rest = rest[1:]
        else:
            raise refused(f"line {line}: '{head}' is not allowed at top level")
        if rest and rest[0] in FAMILIES:
            rest = rest[1:]
        if not rest:
            raise refused(f"line {line}: statement names no table")
        name = unquote(rest[0])
        if name == "handle" or not name.startswith(prefix):
            raise refused(
                f"line {line}: table '{name}' is not a portal table (names must start with "
                f"'{prefix}')"
            )
        if not NAME.fullmatch(name):
            raise refused(f"line {line}: bad table name {name!r}")


def element_only(text: str) -> tuple[set[tuple[str, str, str]], bool] | None:
    """(the (family, table, set) an nft increment touches, whether it flushes one), or None
    when it does anything but add/delete elements or flush a set (then all is read again)."""
    touched: set[tuple[str, str, str]] = set()
    flushes = False
    for _line, tokens in statements(text):
        head, what = tokens[0], tokens[1] if len(tokens) > 1 else ""
        if head in DEFINES:
            continue
        if not (
            (head in ELEMENT_STATEMENTS and what == "element")
            or (head == "flush" and what in {"set", "map"})
        ):
            return None
        rest = tokens[2:]
        family = rest.pop(0) if rest and rest[0] in FAMILIES else "ip"
        if len(rest) != 2:
            return None
        table, name = (unquote(token) for token in rest)
        if not NAME.fullmatch(table + name):
            return None  # variables, handles: not worth guessing
        touched.add((family, table, name))
        flushes = flushes or head == "flush"
    return touched, flushes
