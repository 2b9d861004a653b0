"""The lab's network: overlap refusal, device addresses, traffic through the firewalls, failover.

All traffic runs between lab namespaces (pl-inet -> pl-nat1/2 -> pl-dorm), bounded in packets
and time.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import subprocess
import time

import pytest
from lab_support import HOSTS, REPO, fw, in_ns, lab_sh, push, reset_host, ruleset, run

pytestmark = pytest.mark.lab

DEVICE4, DEVICE6, PUBLIC4 = "10.100.1.23", "2001:db8:100:1::23", "198.51.100.23"


def load_overlap_check():
    spec = importlib.util.spec_from_file_location(
        "overlap_check", REPO / "deploy" / "lab" / "overlap_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT_ADDRS = [
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {
        "ifname": "eth0",
        "addr_info": [
            {"family": "inet", "local": "192.0.2.2", "prefixlen": 24},
            {"family": "inet6", "local": "fd00::2", "prefixlen": 64},
            {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
        ],
    },
    {
        "ifname": "pl-mgmt",
        "addr_info": [{"family": "inet", "local": "10.255.255.1", "prefixlen": 24}],
    },
]
ROOT_ROUTES = [
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "192.0.2.0/24", "dev": "eth0"},
    {"dst": "10.255.255.0/28", "dev": "pl-mgmt"},
    {"dst": "fd00::/64", "dev": "eth0"},
    {"dst": "default", "gateway": "fd00::1", "dev": "eth0"},
    {"type": "local", "dst": "192.0.2.2", "dev": "eth0", "table": "local"},
]


def test_overlap_check_accepts_this_machines_networks():
    check = load_overlap_check()
    assert check.find_overlaps(ROOT_ADDRS, ROOT_ROUTES) == []


@pytest.mark.parametrize(
    ("addrs", "routes", "extra", "expected"),
    [
        (
            [
                {
                    "ifname": "eth1",
                    "addr_info": [{"family": "inet", "local": "10.100.3.4", "prefixlen": 24}],
                }
            ],
            [],
            [],
            "10.100.0.0/16 overlaps 10.100.3.0/24 (address 10.100.3.4/24 on eth1)",
        ),
        (
            [],
            [{"dst": "10.0.0.0/8", "dev": "eth0"}],
            [],
            "overlaps 10.0.0.0/8 (route 10.0.0.0/8 dev eth0)",
        ),
        ([], [{"dst": "198.51.100.0/25", "dev": "tun0", "table": "7"}], [], "198.51.100.0/24"),
        (
            [],
            [{"dst": "default", "gateway": "203.0.113.1", "dev": "eth0"}],
            [],
            "gateway 203.0.113.1",
        ),
        ([], [{"dst": "2001:db8:5::/48", "dev": "eth0"}], [], "2001:db8::/32 overlaps"),
        ([], [], ["10.255.0.0/16"], "PL_LAB_EXTRA_ROOT_RANGES"),
    ],
)
def test_overlap_check_finds_conflicts(addrs, routes, extra, expected):
    check = load_overlap_check()
    problems = check.find_overlaps(ROOT_ADDRS + addrs, ROOT_ROUTES + routes, extra)
    assert any(expected in p for p in problems), problems


def test_lab_sh_refuses_when_a_root_range_overlaps(lab):
    before = run("ip", "netns", "list").stdout
    links_before = run("ip", "-br", "link").stdout
    for command in ("check", "up"):
        result = lab_sh(command, env_extra={"PL_LAB_EXTRA_ROOT_RANGES": "203.0.113.128/25"})
        assert result.returncode == 1, command
        assert "REFUSING" in result.stderr
        assert "203.0.113.0/24 overlaps 203.0.113.128/25" in result.stderr
    assert run("ip", "netns", "list").stdout == before
    assert run("ip", "-br", "link").stdout == links_before
    assert lab_sh("check").returncode == 0


def test_overlap_check_protects_the_resolver(tmp_path):
    check = load_overlap_check()
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search lab\nnameserver 10.255.255.53\nnameserver fd00::53%eth0\n")
    assert check.nameservers(str(resolv)) == ["10.255.255.53", "fd00::53"]
    assert not check.find_overlaps([], [], ["10.255.255.53/32"])  # outside the management /28
    assert check.find_overlaps([], [], ["10.255.255.5/32"])


def test_the_root_namespace_only_gets_the_management_network(lab):
    routes = json.loads(run("ip", "-j", "route", "show", "table", "all").stdout)
    routes += json.loads(run("ip", "-j", "-6", "route", "show", "table", "all").stdout)
    lab_routes = [
        (r["dst"], r["dev"])
        for r in routes
        if r.get("dev", "").startswith("pl-") and r.get("type") not in ("local", "broadcast")
    ]
    assert len(lab_routes) == 1, lab_routes
    mgmt = ipaddress.ip_network(lab_routes[0][0])
    assert lab_routes[0][1] == "pl-mgmt"
    assert mgmt.subnet_of(ipaddress.ip_network("10.255.255.0/24"))
    assert {ipaddress.ip_address(a) for a in HOSTS.values()} <= set(mgmt)
    for resolver in load_overlap_check().nameservers():
        assert ipaddress.ip_address(resolver) not in mgmt, "the lab would shadow the resolver"
    addrs = json.loads(run("ip", "-j", "addr").stdout)
    lab_addrs = [
        (link["ifname"], a["local"])
        for link in addrs
        for a in link["addr_info"]
        if a["local"].startswith(("10.", "198.51.100.", "203.0.113.", "2001:db8"))
    ]
    assert lab_addrs == [("pl-mgmt", "10.255.255.1")]


def test_status_and_idempotent_up(lab):
    again = lab_sh("up")
    assert again.returncode == 0, again.stderr
    status = lab_sh("status")
    assert status.returncode == 0
    assert "lab is up" in status.stdout
    assert "ipv4=pl-nat1 ipv6=pl-nat2" in status.stdout


def test_devices_can_be_added_and_removed(lab):
    assert lab_sh("device-add", "10.100.2.5", "2001:db8:100:2::5").returncode == 0
    assert lab_sh("device-add", "10.100.2.5").returncode == 0  # idempotent
    listed = lab_sh("devices").stdout.split()
    assert {"10.100.2.5", "2001:db8:100:2::5"} <= set(listed)
    assert lab_sh("device-del", "10.100.2.5", "2001:db8:100:2::5").returncode == 0
    assert "10.100.2.5" not in lab_sh("devices").stdout.split()
    for bad in ("192.0.2.5", "10.100.0.1", "fd00::5", "2001:db8:ffff::7", "not-an-ip"):
        refused = lab_sh("device-add", bad)
        assert refused.returncode == 1, bad
        assert "not a device address" in refused.stderr


def ping(ns: str, address: str, count: int = 2) -> bool:
    return in_ns(ns, "ping", "-c", str(count), "-W", "1", address, timeout=10).returncode == 0


def tcp_roundtrip(address: str, port: int, payload: str = "hello-from-pl-inet") -> str:
    """Listen on the device address in pl-dorm, connect from pl-inet; return what arrived."""
    listener = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            "pl-dorm",
            "timeout",
            "5",
            "nc",
            "-l",
            "-s",
            DEVICE4,
            "-p",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.3)
        in_ns(
            "pl-inet",
            "timeout",
            "5",
            "nc",
            "-N",
            "-w",
            "2",
            address,
            str(port),
            input=payload + "\n",
        )
        out, _ = listener.communicate(timeout=8)
        return out.strip()
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


@pytest.fixture
def device(lab):
    assert lab_sh("device-add", DEVICE4, DEVICE6).returncode == 0
    yield DEVICE4
    lab_sh("device-del", DEVICE4, DEVICE6)


def allow_device() -> tuple[str, ...]:
    return (f"ip daddr {DEVICE4} accept", f"ip6 daddr {DEVICE6} accept", 'iifname "dorm0" accept')


def test_ipv4_reaches_a_device_through_pl_nat1_when_the_rule_set_allows_it(device):
    reset_host("pl-nat1")
    nat = ((PUBLIC4, DEVICE4),)
    push("pl-nat1", ruleset("deny", forward_policy="drop", nat=nat))
    assert not ping("pl-inet", PUBLIC4, count=1)

    push("pl-nat1", ruleset("allow", forward_policy="drop", allow=allow_device(), nat=nat))
    assert ping("pl-inet", PUBLIC4)
    assert tcp_roundtrip(PUBLIC4, 8080) == "hello-from-pl-inet"
    # The device leaves with its public address (SNAT on pl-nat1).
    assert (
        in_ns("pl-dorm", "ping", "-c", "1", "-W", "1", "-I", DEVICE4, "203.0.113.10").returncode
        == 0
    )
    conntrack = fw("pl-nat1", "health").data["conntrack"]["count"]
    assert conntrack >= 1


def test_ipv6_reaches_a_device_through_pl_nat2(device):
    reset_host("pl-nat2")
    push("pl-nat2", ruleset("deny6", forward_policy="drop"))
    assert not ping("pl-inet", DEVICE6, count=1)
    push("pl-nat2", ruleset("allow6", forward_policy="drop", allow=allow_device()))
    assert ping("pl-inet", DEVICE6)


def test_failover_moves_ipv4_to_pl_nat2_and_back(device):
    nat = ((PUBLIC4, DEVICE4),)
    for host in ("pl-nat1", "pl-nat2"):
        reset_host(host)
        push(host, ruleset("ha", forward_policy="drop", allow=allow_device(), nat=nat))
    try:
        assert lab_sh("host-down", "nat1").returncode == 0
        assert "203.0.113.1/24" in in_ns("pl-nat2", "ip", "-br", "addr").stdout
        assert "203.0.113.1/24" not in in_ns("pl-nat1", "ip", "-br", "addr").stdout
        assert ping("pl-inet", PUBLIC4)
        assert ping("pl-inet", DEVICE6)
        assert tcp_roundtrip(PUBLIC4, 8081) == "hello-from-pl-inet"
    finally:
        assert lab_sh("host-up", "nat1").returncode == 0
        assert lab_sh("failback").returncode == 0
    assert "203.0.113.1/24" in in_ns("pl-nat1", "ip", "-br", "addr").stdout
    assert ping("pl-inet", PUBLIC4)
