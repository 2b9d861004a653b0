"""portal_fw.tc: the static check catches what can be known without the kernel."""

from __future__ import annotations

import pytest

from portal_fw import tc
from portal_fw.common import HelperError

GOOD = (
    "qdisc replace dev lo root handle 1: htb default 2\n"
    "class replace dev lo parent 1: classid 1:2 htb rate 1000mbit ceil 1000mbit burst 125000\n"
    "# a comment\n"
    "filter add dev lo parent 1: handle 800::800 u32 match ip dst 10.0.0.1 flowid 1:2\n"
)


def test_a_good_batch_names_its_devices():
    assert tc.static_check(GOOD) == {"lo"}
    assert tc.devices(GOOD) == {"lo"}


@pytest.mark.parametrize(
    ("line", "kind", "message"),
    [
        ("filter add dev lo parent 1: bpf obj /tmp/x.o", "refused", "'bpf'"),
        ("action add dev lo", "refused", "only qdisc, class and filter"),
        ("qdisc show dev lo", "failed", "the verb must be"),
        (
            "class replace dev nosuch0 parent 1: classid 1:3 htb rate 1mbit",
            "failed",
            "does not exist",
        ),
        ("class replace dev lo parent 1: htb rate 1mbit", "failed", "needs a classid"),
        ("class replace dev lo parent 1: classid 1:3 htb rate 2mbit ceil 1mbit", "failed", "ceil"),
        ("class replace dev lo parent 1: classid 1:3 htb rate 9tbit", "failed", "outside"),
        ("class replace dev lo parent zz classid 1:3 htb rate 1mbit", "failed", "bad parent"),
        (
            "class replace dev lo parent 1: classid 1:3 htb rate 1mbit burst -5",
            "failed",
            "bad burst",
        ),
        ("qdisc replace root handle 1: htb", "failed", "names no device"),
        ("class replace dev lo parent 1: classid 1:3 htb rate", "failed", "needs a value"),
    ],
)
def test_a_bad_line_is_reported_with_its_number(line, kind, message):
    with pytest.raises(HelperError) as caught:
        tc.static_check("qdisc replace dev lo root handle 1: htb\n" + line + "\n")
    assert caught.value.kind == kind
    assert message in caught.value.message
    if kind == "failed":
        assert caught.value.message.startswith("tc line 2:")
