"""Drift by content: a hand change on a lab firewall is detected part by part from the
helper's read-back digest, shown on the host page, and repaired by a push."""

from __future__ import annotations

import pytest
from django.urls import reverse
from lab_support import in_ns
from push_support import version

from apps.firewall.models import FirewallHost
from apps.firewall.order import ruleset_rollout
from apps.health.services import host_health_collect, host_warnings
from workers.health import firewall_health_collect

pytestmark = [pytest.mark.lab, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def digest_every_collection(settings):
    """Every collection reads the digest back (not only one every 25 s)."""
    settings.PORTAL_HEALTH_DIGEST_INTERVAL = 0


TABLE = ("inet", "portal_fw")
NAT_TABLE = ("ip", "portal_nat")  # the NAT chains and maps: the second portal table


def forward_elements() -> str:
    return in_ns("pl-nat1", "nft", "list", "map", *NAT_TABLE, "fwd_tcp").stdout


def forward_chain() -> str:
    return in_ns("pl-nat1", "nft", "list", "chain", *TABLE, "forward").stdout


def member_class() -> str:
    return in_ns("pl-nat1", "tc", "-d", "class", "show", "dev", "dorm0", "classid", "1:10").stdout


HAND_CHANGES = {
    "element deleted from a port-forward map": (
        ["nft", "delete", "element", *NAT_TABLE, "fwd_tcp", "{ 198.51.100.23 . 8080 }"],
        "nft:ip portal_nat map fwd_tcp",
        lambda: "198.51.100.23 . 8080" in forward_elements(),
    ),
    "rule added to a chain": (
        ["nft", "add", "rule", *TABLE, "forward", "ip", "saddr", "203.0.113.99", "accept"],
        "nft:inet portal_fw chain forward",
        lambda: "203.0.113.99" not in forward_chain(),
    ),
    "shaping class changed": (
        [
            "tc",
            "class",
            "change",
            "dev",
            "dorm0",
            "parent",
            "1:",
            "classid",
            "1:10",
            "htb",
            "rate",
            "8000kbit",
            "ceil",
            "8000kbit",
        ],
        "tc:dorm0",
        lambda: "rate 4Mbit" in member_class(),
    ),
}


@pytest.fixture
def applied(hosts):
    versions = [version(h, shaped=True) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=versions))
    return {v.host.name: v for v in versions}


@pytest.mark.parametrize("change", sorted(HAND_CHANGES))
def test_a_hand_change_is_detected_shown_and_repaired(change, applied, client_for):
    command, part, as_pushed = HAND_CHANGES[change]
    assert as_pushed()
    result = in_ns("pl-nat1", *command)
    assert result.returncode == 0, result.stderr
    assert not as_pushed()

    host = FirewallHost.objects.get(name="pl-nat1")
    sample = host_health_collect(host=host)
    host.refresh_from_db()
    assert host.drift == [part]  # exactly the part that was changed
    assert sample.loaded_version == applied["pl-nat1"].content_hash  # same version, other content
    assert [w.code for w in host_warnings(host=host, sample=sample)] == ["drift"]
    page = client_for("support").get(reverse("firewall:host_detail", args=[host.name]))
    assert part in page.content.decode()
    other = FirewallHost.objects.get(name="pl-nat2")
    assert host_health_collect(host=other).reachable
    other.refresh_from_db()
    assert other.drift == []  # only the changed host

    firewall_health_collect()  # the beat: collect, see the drift, push the bundle again in full
    assert as_pushed()
    host.refresh_from_db()
    assert host.drift == []
    sample = host_health_collect(host=host)
    host.refresh_from_db()
    assert host.drift == []
    assert host_warnings(host=host, sample=sample) == []


def nft_table_handle() -> str:
    """The handle of the portal's table: a full load makes the table anew (another handle)."""
    first_line = in_ns("pl-nat1", "nft", "-a", "list", "table", *TABLE).stdout.splitlines()[0]
    return first_line.split("# handle ")[1].strip()


def tc_events_during(action) -> list[str]:
    """`tc monitor` on pl-nat1 while `action` runs: every qdisc/class change made."""
    import subprocess
    import time

    proc = subprocess.Popen(
        ["ip", "netns", "exec", "pl-nat1", "stdbuf", "-oL", "tc", "monitor"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        action()
        time.sleep(0.5)
    finally:
        proc.terminate()  # our own monitor
        out, _ = proc.communicate(timeout=5)
    return [line for line in out.splitlines() if line.strip()]


def test_only_the_drifted_part_is_repaired(applied):
    """Issue 26: a drift repair pushed everything. Now a tc drift is repaired by the tc tree
    alone (the rule set is not loaded again: its table keeps its handle), and an nft drift by
    the rule set alone (tc sees no change at all)."""
    command, _, as_pushed = HAND_CHANGES["shaping class changed"]
    assert in_ns("pl-nat1", *command).returncode == 0
    table = nft_table_handle()
    host = FirewallHost.objects.get(name="pl-nat1")
    firewall_health_collect()
    assert as_pushed()
    assert nft_table_handle() == table  # nft untouched
    host.refresh_from_db()
    assert (host.drift, host.push_status) == ([], "applied")

    command, _, as_pushed = HAND_CHANGES["rule added to a chain"]
    assert in_ns("pl-nat1", *command).returncode == 0
    events = tc_events_during(firewall_health_collect)
    assert as_pushed()
    assert nft_table_handle() != table  # the rule set was loaded again
    assert events == []  # tc untouched
    host.refresh_from_db()
    assert (host.drift, host.push_status) == ([], "applied")
