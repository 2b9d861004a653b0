"""Router advertisements per device, so each device autoconfigures in its room's /64.

Rooms share the member-side segment, so one multicast RA would hand every device every room's
prefix. Instead this daemon answers each device alone: a Router Solicitation from MAC m gets an
RA with m's room prefix only, sent as an Ethernet frame to m (IPv6 destination ff02::1, so the
device accepts it whatever its link-local address). Every `refresh` seconds it sends the same
to every device it heard from, before their lifetimes run out. The RA comes from the virtual
link-local gateway address (`source`, fe80::1 by default) and only while this host holds it:
the host with the IPv6 gateway role answers, its peer stays silent, and after a failover the
devices' router is the same address on the other host.

    portal-ra run CONFIG        the daemon (Debian: a systemd unit; the lab: lab.sh up)
    portal-ra reload CONFIG     tell the running daemon to read CONFIG again (SIGHUP via its pid
                                file), after checking it; exit 1 when it is not running
    portal-ra check CONFIG      parse and validate CONFIG

CONFIG (JSON, the portal's `portal-ra` bundle artefact):
    {"interface": "dorm0", "source": "fe80::1", "router_lifetime": 1800,
     "valid_lifetime": 86400, "preferred_lifetime": 14400, "refresh": 600,
     "prefixes": {"02:00:00:00:01:05": "2001:db8:100:101::/64", ...},
     "pid_file": "/run/portal-ra.pid"}

The entry point `portal-ra` (a launcher beside the package) runs `main`; root (a raw packet
socket on the interface).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

Config = dict[str, Any]

ETH_P_IPV6 = 0x86DD
MAC_RE = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")
IFNAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
ALL_NODES = ipaddress.IPv6Address("ff02::1")


class ConfigError(ValueError):
    pass


def load(path: str, *, check_only: bool = False) -> Config:
    """The configuration at `path`, validated; `check_only`: the prefixes are validated but
    kept as their text (no objects built: `portal-ra check` runs with every push that changes
    the file)."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError("the configuration is one JSON object")
    iface = raw.get("interface")
    if not isinstance(iface, str) or not IFNAME_RE.fullmatch(iface):
        raise ConfigError(f"interface {iface!r} is not an interface name")
    try:
        source = ipaddress.IPv6Address(raw.get("source", "fe80::1"))
    except ValueError as exc:
        raise ConfigError(f"source: {exc}") from exc
    if not source.is_link_local:
        raise ConfigError(f"source {source} is not a link-local address")
    numbers = {}
    for key, default, lo, hi in (
        ("router_lifetime", 1800, 0, 9000),
        ("valid_lifetime", 86400, 60, 2**32 - 2),
        ("preferred_lifetime", 14400, 0, 2**32 - 2),
        ("refresh", 600, 5, 86400),
    ):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(f"{key} must be an integer {lo}..{hi}")
        numbers[key] = value
    if numbers["preferred_lifetime"] > numbers["valid_lifetime"]:
        raise ConfigError("preferred_lifetime is longer than valid_lifetime")
    prefixes = {}
    parsed: dict[Any, ipaddress.IPv6Network] = {}  # a room's /64 is parsed once for its devices
    for mac, prefix in (raw.get("prefixes") or {}).items():
        if not MAC_RE.fullmatch(str(mac)):
            raise ConfigError(f"{mac!r} is not a MAC address (lower-case hex pairs)")
        net = parsed.get(prefix) if isinstance(prefix, str) else None
        if net is None:
            net = _prefix64(mac, prefix, check_only)
            if isinstance(prefix, str):
                parsed[prefix] = net
        prefixes[bytes.fromhex(mac.replace(":", ""))] = net
    pid_file = raw.get("pid_file", "/run/portal-ra.pid")
    if not isinstance(pid_file, str) or not pid_file.startswith("/"):
        raise ConfigError("pid_file must be an absolute path")
    return {"interface": iface, "source": source, "prefixes": prefixes, "pid_file": pid_file,
            **numbers}  # fmt: skip


def _pid_file_of(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    pid_file = raw.get("pid_file", "/run/portal-ra.pid") if isinstance(raw, dict) else None
    if not isinstance(pid_file, str) or not pid_file.startswith("/"):
        raise ConfigError("pid_file must be an absolute path")
    return {"pid_file": pid_file}


def _prefix64(mac: str, prefix: Any, check_only: bool = False) -> Any:
    """A device's /64 (at 60,000 devices the file is checked with every push that changes it:
    the address through inet_pton, about ten times faster than IPv6Network's parser);
    `check_only`: validated, answered as the text."""
    if isinstance(prefix, str) and prefix.endswith("/64") and "%" not in prefix:
        try:
            packed = socket.inet_pton(socket.AF_INET6, prefix[:-3])
        except OSError:
            packed = b""
        if len(packed) == 16 and not any(packed[8:]):
            if check_only:
                return prefix
            return ipaddress.IPv6Network((int.from_bytes(packed, "big"), 64))
    try:
        net = ipaddress.IPv6Network(prefix)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"prefix of {mac}: {exc}") from exc
    if net.prefixlen != 64:
        raise ConfigError(f"prefix of {mac}: {net} is not a /64 (SLAAC needs one)")
    return net


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return int(~total & 0xFFFF)


def ra_frame(cfg: Config, own_mac: bytes, mac: bytes, prefix: ipaddress.IPv6Network) -> bytes:
    """Ethernet + IPv6 + ICMPv6 RA with one prefix (A and L set) and our link-layer address."""
    icmp = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, cfg["router_lifetime"], 0, 0)
    icmp += struct.pack("!BB6s", 1, 1, own_mac)  # source link-layer address
    icmp += struct.pack("!BBBBIII16s", 3, 4, 64, 0xC0, cfg["valid_lifetime"],
                        cfg["preferred_lifetime"], 0, prefix.network_address.packed)  # fmt: skip
    src, dst = cfg["source"].packed, ALL_NODES.packed
    pseudo = src + dst + struct.pack("!I3xB", len(icmp), 58)
    icmp = icmp[:2] + struct.pack("!H", checksum(pseudo + icmp)) + icmp[4:]
    ip6 = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 255, src, dst)
    return mac + own_mac + struct.pack("!H", ETH_P_IPV6) + ip6 + icmp


def holds_source(cfg: Config) -> bool:
    """Does this host hold the gateway's link-local address on the interface (IPv6 role)?"""
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as fh:
            want = cfg["source"].packed.hex()
            return any(
                line.split()[0] == want and line.split()[5] == cfg["interface"]
                for line in fh
                if line.strip()
            )
    except OSError:
        return False


SO_ATTACH_FILTER = 26
# Classic BPF: IPv6 (ethertype 0x86dd), next header 58 (ICMPv6, no extension headers), type 133.
RS_FILTER = [
    (0x28, 0, 0, 12),  # ldh [12]
    (0x15, 0, 5, ETH_P_IPV6),  # jeq 0x86dd, else drop
    (0x30, 0, 0, 20),  # ldb [20]: next header
    (0x15, 0, 3, 58),  # jeq 58, else drop
    (0x30, 0, 0, 54),  # ldb [54]: ICMPv6 type
    (0x15, 0, 1, 133),  # jeq 133 (Router Solicitation), else drop
    (0x06, 0, 0, 0xFFFF),  # ret: accept
    (0x06, 0, 0, 0),  # ret: drop
]


def attach_rs_filter(sock: socket.socket) -> None:
    import ctypes

    program = b"".join(struct.pack("HBBI", *ins) for ins in RS_FILTER)
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HL", len(RS_FILTER), ctypes.addressof(buffer))  # copied by the kernel
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def rs_source_mac(frame: bytes) -> bytes | None:
    """The sender MAC of a Router Solicitation frame, else None."""
    if len(frame) < 14 + 40 + 8 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IPV6:
        return None
    if frame[14 + 6] != 58 or frame[14 + 40] != 133:  # next header ICMPv6, type RS
        return None
    return frame[6:12]


def run(path: str) -> int:
    cfg = load(path)
    with open(cfg["pid_file"], "w", encoding="ascii") as fh:
        fh.write(f"{os.getpid()}\n")
    reload_wanted = False

    def on_hup(*_: object) -> None:
        nonlocal reload_wanted
        reload_wanted = True

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
    attach_rs_filter(sock)  # the kernel hands us Router Solicitations only, not the traffic
    sock.bind((cfg["interface"], 0))
    own_mac = sock.getsockname()[4]
    heard: dict[bytes, float] = {}
    next_refresh = time.monotonic() + cfg["refresh"]

    def advertise(mac: bytes) -> None:
        prefix = cfg["prefixes"].get(mac)
        if prefix is not None and holds_source(cfg):
            try:
                sock.send(ra_frame(cfg, own_mac, mac, prefix))
            except OSError as exc:  # the link is down (a failed host): try at the next refresh
                sys.stderr.write(f"portal-ra: sending to {mac.hex(':')} failed: {exc}\n")

    while True:
        if reload_wanted:
            reload_wanted = False
            try:
                cfg = {**load(path), "interface": cfg["interface"]}
            except ConfigError as exc:
                sys.stderr.write(
                    f"portal-ra: reload refused, keeping the old configuration: {exc}\n"
                )
            for known in list(heard):  # a changed prefix reaches its device at once
                advertise(known)
        timeout = max(0.0, next_refresh - time.monotonic())
        try:
            ready, _, _ = select.select([sock], [], [], timeout)
        except InterruptedError:
            continue
        if ready:
            try:
                frame = sock.recv(2048)
            except OSError:  # ENETDOWN while the link is down: keep listening
                time.sleep(0.2)
                continue
            sender = rs_source_mac(frame)
            if sender is not None:
                heard[sender] = time.monotonic()
                advertise(sender)
        if time.monotonic() >= next_refresh:
            next_refresh = time.monotonic() + cfg["refresh"]
            horizon = time.monotonic() - cfg["valid_lifetime"]
            for mac, seen in list(heard.items()):
                if seen < horizon:
                    del heard[mac]
                else:
                    advertise(mac)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"run", "reload", "check"}:
        sys.stderr.write(__doc__)
        return 2
    verb, path = argv
    try:
        # reload: the daemon validates the file itself at SIGHUP (and keeps its configuration
        # when it is refused), and the agent checked it before writing it: only its pid file
        # is read here (a full load of 60,000 prefixes: 0.2 s on the path of every push).
        check = verb == "check"
        cfg = _pid_file_of(path) if verb == "reload" else load(path, check_only=check)
    except ConfigError as exc:
        sys.stderr.write(f"portal-ra: {exc}\n")
        return 1
    if verb == "check":
        sys.stdout.write(
            f"portal-ra: {len(cfg['prefixes'])} device prefix(es) on {cfg['interface']}\n"
        )
        return 0
    if verb == "reload":
        try:
            with open(cfg["pid_file"], encoding="ascii") as fh:
                pid = int(fh.read().strip())
            os.kill(pid, signal.SIGHUP)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"portal-ra: not running ({cfg['pid_file']}: {exc})\n")
            return 1
        return 0
    return run(path)
