"""portal_fw.scope: nft text may only touch the portal's tables; element-only increments."""

from __future__ import annotations

import pytest

from portal_fw.common import HelperError
from portal_fw.scope import check_scope, element_only, statements


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
