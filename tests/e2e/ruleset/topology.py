"""A small namespace topology of our own for the compiler's packet tests (names start pl-c).

    pl-cinet  pl-ciu 203.0.113.10/24, 2001:db8:ffff::10/64
        |
    pl-cfw    pl-cfwu 203.0.113.1/24, 2001:db8:ffff::1/64   (uplink)
              pl-cfwd 10.100.0.1/16, 2001:db8:100:1::1/64   (member side)
        |
    pl-cdorm  pl-cdd  device addresses 10.100.0.x/16, 2001:db8:100:1::x/64

Only lab ranges are used and nothing is added to the root namespace. Every command runs through
`ip netns exec` with a timeout; `teardown()` deletes every namespace whose name starts with pl-c.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PREFIX = "pl-c"
FW, INET, DORM = "pl-cfw", "pl-cinet", "pl-cdorm"
NETPEER = str(Path(__file__).with_name("netpeer.py"))
CTDUMP = str(Path(__file__).with_name("ctdump.py"))
PYTHON = sys.executable


def require_root_and_tools() -> None:
    """Fail (never skip) with a clear message when the lab cannot run."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the compiler's lab tests need root (network namespaces)")
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` is missing (apt-get install nftables iproute2)")
    if problems:
        raise RuntimeError("; ".join(problems))


def run(
    *cmd: str,
    ns: str | None = None,
    check: bool = True,
    timeout: float = 30,
    stdin: str | None = None,
) -> str:
    """Run a command (inside `ns` when given), bounded; return stdout."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, input=stdin, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def namespaces() -> list[str]:
    """Our namespaces currently present."""
    return [
        line.split()[0]
        for line in run("ip", "netns", "list").splitlines()
        if line.startswith(PREFIX)
    ]


def add_namespace(name: str) -> None:
    assert name.startswith(PREFIX)
    run("ip", "netns", "add", name)
    run("ip", "link", "set", "lo", "up", ns=name)
    # No duplicate address detection: a tentative link-local address delays neighbour
    # discovery by a second or two, and the first IPv6 connection of a test timed out.
    for conf in ("all", "default"):
        run("sysctl", "-qw", f"net.ipv6.conf.{conf}.accept_dad=0", ns=name)


def teardown() -> None:
    """Delete every namespace of ours (processes inside die with their sockets' namespace)."""
    for name in namespaces():
        for pid in run("ip", "netns", "pids", name, check=False).split():
            subprocess.run(["kill", "-9", pid], check=False, timeout=10)
        run("ip", "netns", "del", name, check=False)


def veth(ns_a: str, if_a: str, ns_b: str, if_b: str, queues: int = 1) -> None:
    """A veth pair created inside ns_a, its peer moved to ns_b."""
    extra = ["numtxqueues", str(queues), "numrxqueues", str(queues)] if queues > 1 else []
    run("ip", "link", "add", if_a, *extra, "type", "veth", "peer", "name", if_b, *extra, ns=ns_a)
    if ns_b != ns_a:
        run("ip", "link", "set", if_b, "netns", ns_b, ns=ns_a)
    run("ip", "link", "set", if_a, "up", ns=ns_a)
    run("ip", "link", "set", if_b, "up", ns=ns_b)


def addr(ns: str, dev: str, *cidrs: str) -> None:
    for cidr in cidrs:
        extra = ["nodad"] if ":" in cidr else []
        run("ip", "addr", "add", cidr, "dev", dev, *extra, ns=ns)


def build_topology(dorm_addresses: list[str]) -> None:
    """Create pl-cfw, pl-cinet and pl-cdorm with routing as in production."""
    for ns in (FW, INET, DORM):
        add_namespace(ns)
    veth(FW, "pl-cfwu", INET, "pl-ciu")
    veth(FW, "pl-cfwd", DORM, "pl-cdd")
    for ns in (FW, INET, DORM):
        run("sysctl", "-qw", "net.ipv6.conf.all.accept_ra=0", ns=ns)
    run("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=FW)
    run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", ns=FW)
    addr(FW, "pl-cfwu", "203.0.113.1/24", "2001:db8:ffff::1/64")
    addr(FW, "pl-cfwd", "10.100.0.1/16", "2001:db8:100:1::1/64")
    addr(INET, "pl-ciu", "203.0.113.10/24", "2001:db8:ffff::10/64")
    addr(DORM, "pl-cdd", *dorm_addresses)
    run("ip", "route", "add", "198.51.100.0/24", "via", "203.0.113.1", ns=INET)
    run("ip", "-6", "route", "add", "2001:db8:100::/48", "via", "2001:db8:ffff::1", ns=INET)
    run("ip", "route", "add", "default", "via", "10.100.0.1", ns=DORM)
    run("ip", "-6", "route", "add", "default", "via", "2001:db8:100:1::1", ns=DORM)
    wait_until_no_tentative_addresses((FW, INET, DORM))


def wait_until_no_tentative_addresses(names: tuple[str, ...], seconds: float = 5) -> None:
    """Bounded wait until no IPv6 address in `names` is still tentative."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(run("ip", "-6", "addr", "show", "tentative", ns=ns).strip() for ns in names):
            return
        time.sleep(0.1)


def load(ns: str, nft: str | None = None, tc: str | None = None) -> None:
    """Apply a tc batch, then an nft transaction, from files, as the host helper does."""
    with tempfile.TemporaryDirectory(prefix="pl-c-") as tmp:
        if tc:
            Path(tmp, "rules.tc").write_text(tc)
            run("tc", "-batch", str(Path(tmp, "rules.tc")), ns=ns)
        if nft:
            Path(tmp, "rules.nft").write_text(nft)
            run("nft", "-f", str(Path(tmp, "rules.nft")), ns=ns, timeout=60)


def nft_check(ns: str, nft: str) -> subprocess.CompletedProcess[str]:
    """`nft -c -f` in a namespace: parse and validate against the kernel without applying."""
    with tempfile.NamedTemporaryFile("w", prefix="pl-c-", suffix=".nft") as f:
        f.write(nft)
        f.flush()
        return subprocess.run(
            ["ip", "netns", "exec", ns, "nft", "-c", "-f", f.name],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def peer(
    ns: str, *args: str, timeout: float = 15, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run netpeer.py in a namespace and wait for it (bounded)."""
    return subprocess.run(
        ["ip", "netns", "exec", ns, "timeout", str(int(timeout)), PYTHON, NETPEER, *args],
        capture_output=True,
        text=True,
        timeout=timeout + 5,
        input=stdin,
        check=False,
    )


class Server:
    """A background netpeer server in a namespace, stopped on exit; waits for "ready"."""

    def __init__(self, ns: str, *args: str, seconds: int = 90) -> None:
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "timeout",
                str(seconds),
                PYTHON,
                NETPEER,
                "serve",
                *args,
                "--seconds",
                str(seconds),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded by `timeout` above
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(
                f"server {args} did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )

    def stop(self) -> str:
        """Stop the server and return what it printed (one line per client)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            stdout, _ = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, _ = self.proc.communicate(timeout=5)
        return stdout

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def normalised_ruleset(ns: str) -> Any:
    """`nft -j list ruleset` without handles and with set elements sorted."""
    data = json.loads(run("nft", "-j", "list", "ruleset", ns=ns, timeout=60))

    def clean(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items() if k not in ("handle", "metainfo")}
        if isinstance(obj, list):
            return [clean(v) for v in obj]
        return obj

    items = []
    for item in data["nftables"]:
        if "metainfo" in item:
            continue
        item = clean(item)
        for kind in ("set", "map"):
            if kind in item and "elem" in item[kind]:
                item[kind]["elem"] = sorted(
                    item[kind]["elem"], key=lambda e: json.dumps(e, sort_keys=True)
                )
        items.append(item)
    return sorted(items, key=lambda e: json.dumps(e, sort_keys=True))


def tc_classes(ns: str, dev: str) -> list[str]:
    """`tc class show` lines of a device (class id, parent, rates, bursts), sorted."""
    return sorted(
        line.strip()
        for line in run("tc", "class", "show", "dev", dev, ns=ns).splitlines()
        if line.startswith("class htb")
    )


def rule_counter(ns: str, chain: str, comment: str) -> int:
    """Packets counted by the rule of `chain` (table inet portal_fw) whose comment starts so."""
    listing = run("nft", "list", "chain", "inet", "portal_fw", chain, ns=ns)
    for line in listing.splitlines():
        if f'comment "{comment}' in line:
            return int(line.split("counter packets ")[1].split()[0])
    raise AssertionError(f"no rule with comment {comment!r} in chain {chain}")


def conntrack_entries(ns: str, family: str) -> list[dict[str, Any]]:
    """The conntrack entries of `family` ("ipv4"/"ipv6") in `ns` with their status bits
    (ctdump.py: `conntrack -L` does not print the NAT bits)."""
    listing = run(PYTHON, CTDUMP, family, ns=ns)
    return [json.loads(line) for line in listing.splitlines() if line.strip()]


class Held:
    """An echo connection held open from `ns` (netpeer hold): `echo(text)` answers its reply."""

    def __init__(self, ns: str, addr: str, port: int, *extra: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "timeout", "30", PYTHON, NETPEER, "hold", addr,
             str(port), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "connected":
            self.close()
            raise RuntimeError(f"hold {addr} {port}: {line!r}")

    def echo(self, text: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
