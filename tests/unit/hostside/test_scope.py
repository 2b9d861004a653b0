"""portal_fw.scope: nft text may only touch the portal's tables; element-only increments."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal_fw.common import HelperError, refused
from portal_fw.scope import INCLUDE_LIKE, check_scope, element_only, statements


@pytest.mark.parametrize(
    "text",
    [
        "table inet portal_fw {\n\tchain forward { type filter hook forward priority 0; }\n}\n",
        "delete table inet portal_fw\ntable inet portal_fw {\n}\n",
        "add element inet portal_fw fwd_tcp { 198.51.100.5 . 80 : 10.0.0.1 . 80 }\n",
        'define X = 1\ntable ip portal_nat {\n\tcomment "a { b } # c"\n}\n',
        "flush set inet portal_fw blocked\n",
    ],
)
def test_portal_statements_pass(text):
    check_scope(text, "portal_")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flush ruleset\n", "not allowed (only portal tables)"),
        ("table ip filter {\n}\n", "not a portal table"),
        ('include "/etc/nftables.conf"\n', "include"),
        ('table inet portal_x {\n\tinclude "/etc/shadow"\n}\n', "include"),
        ("delete table inet handle 1\n", "not a portal table"),
        ("list ruleset\n", "not allowed"),
        ("table inet portal_x {\n", "unbalanced"),
        ('table inet portal_x { comment "open\n}\n', "unterminated"),
        ("table inet portal_x {}\x00", "NUL"),
        ("add rule inet other c accept\n", "not a portal table"),
    ],
)
def test_anything_else_is_refused_with_the_line(text, message):
    with pytest.raises(HelperError) as caught:
        check_scope(text, "portal_")
    assert caught.value.kind == "refused"
    assert message in caught.value.message


def test_statements_keep_line_numbers_and_drop_block_contents():
    text = "table inet portal_a {\n\tset s { type ipv4_addr; }\n}\n\nadd element inet portal_a s { 1.2.3.4 }\n"
    assert statements(text) == [
        (1, ["table", "inet", "portal_a"]),
        (5, ["add", "element", "inet", "portal_a", "s"]),
    ]


def test_element_only_names_the_touched_sets():
    text = (
        "delete element inet portal_fw fwd_tcp { 198.51.100.5 . 80 }\n"
        "add element inet portal_fw fwd_tcp { 198.51.100.6 . 80 : 10.0.0.1 . 80 }\n"
        "add element ip portal_nat src { 10.0.0.1 }\n"
    )
    assert element_only(text) == (
        {("inet", "portal_fw", "fwd_tcp"), ("ip", "portal_nat", "src")},
        False,
    )
    assert element_only("flush set inet portal_fw blocked\n") == (
        {("inet", "portal_fw", "blocked")},
        True,
    )


@pytest.mark.parametrize(
    "text",
    [
        "add rule inet portal_fw forward accept\n",
        "table inet portal_fw {\n}\n",
        "add element inet portal_fw $SET { 1.2.3.4 }\n",
        "delete chain inet portal_fw c\n",
    ],
)
def test_anything_but_elements_is_not_an_element_increment(text):
    assert element_only(text) is None


def test_the_compilers_two_tables_and_their_increments_are_in_scope():
    """What the compiler sends: the full text names `inet portal_fw` and `ip portal_nat`, and
    an increment of a new device with a forward touches both, element-only."""
    from tests.unit.ruleset.builders import make_member, make_snapshot
    from workers.ruleset import compile_snapshot, diff
    from workers.ruleset import snapshot as s

    old = compile_snapshot(make_snapshot((make_member(1),)))
    member = make_member(1, forwards=(s.PortForward(1, "tcp", 8080, 10, 80),))
    new = compile_snapshot(make_snapshot((member, make_member(2, public="198.51.100.6"))))
    check_scope(new.nft, "portal_")
    assert [tokens for _line, tokens in statements(new.nft) if tokens[0] == "delete"] == [
        ["delete", "table", "inet", "portal_fw"],
        ["delete", "table", "ip", "portal_nat"],
    ]
    step = diff(old, new)
    assert step is not None
    check_scope(step.nft, "portal_")
    touched, flushes = element_only(step.nft) or (set(), True)
    assert not flushes
    assert {("ip", "portal_nat", "fwd_tcp"), ("ip", "portal_nat", "src_nat")} <= touched
    assert ("inet", "portal_fw", "acct4_out") in touched


# ---------------------------------------------------------------------- the splitter's fast path
# The character-at-a-time splitter as it was before blocks were skipped (issue 26): the fast
# path must give the same statements, line numbers and refusals.
def reference_statements(text: str) -> list[tuple[int, list[str]]]:
    """Split nft text into top-level statements: (line number, tokens outside any braces).

    Tokens inside ``{ ... }`` blocks are dropped (a table block cannot name another table);
    comments and quoted strings are honoured.
    """
    found: list[tuple[int, list[str]]] = []
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
            found.append((start_line, tokens))
            tokens = []
        if depth == 0:
            start_line = line

    while i < n:
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
    return found


def _outcome(split, text):
    try:
        return split(text)
    except HelperError as exc:
        return (exc.kind, exc.message)


FRAGMENTS = st.sampled_from(
    [
        "table",
        " inet ",
        "portal_a",
        "add element inet portal_a s",
        "{",
        "}",
        "{ ",
        " }",
        "\n",
        ";",
        " ",
        "\t",
        "\r",
        "\\\n",
        "\\",
        "#",
        '# a { b } " c\n',
        '"',
        '"x { } # y"',
        "1.2.3.4",
        "include",
        "inclu",
        "de",
        "i",
        "nclude",
        "x",
        ":",
        ", ",
        "delete table inet portal_a\n",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(FRAGMENTS, max_size=40))
def test_the_fast_splitter_matches_the_character_loop(parts):
    text = "".join(parts)
    assert _outcome(statements, text) == _outcome(reference_statements, text)


def test_a_compiled_rule_set_skips_its_blocks_and_splits_as_before():
    golden = Path(__file__).parents[1] / "ruleset" / "golden"
    for path in sorted(golden.glob("*.nft")):
        text = path.read_text()
        assert INCLUDE_LIKE.search(text) is None  # the fast path is the one taken
        assert statements(text) == reference_statements(text)
        # An include inside a block, joined across a comment and a newline, is still found.
        hidden = text.replace("chain forward {", "chain forward {\n\tinclu#x\nde\n", 1)
        with pytest.raises(HelperError, match="include"):
            check_scope(hidden, "portal_")
