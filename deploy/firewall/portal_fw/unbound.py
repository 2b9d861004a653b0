"""The members' resolver on this host: Unbound, configured by the bundle's `unbound` artefact.

    unbound-ctl check FILE    unbound-checkconf FILE, and FILE must name a local control socket
                              (the reload and the health figures need it); exit 0: accepted
    unbound-ctl reload FILE [--unit UNIT]
                              make Unbound serve FILE: `reload_keep_cache` (the cache survives
                              when threads and cache sizes are unchanged; Debian 12's 1.17.1 has
                              it), `reload` when this Unbound lacks it. Unbound re-opens no
                              listening socket on a reload: when FILE's `interface:` addresses
                              differ from the sockets the running Unbound holds (read from the
                              kernel), or none runs, it is restarted instead (`systemctl restart
                              UNIT`, else `unbound-control stop` + `unbound -c FILE`): the cache
                              is lost then, which only a change of addresses causes
    unbound-ctl stats FILE    the health figures (stats_noreset), one JSON object

The artefact is an ordinary declared file (deploy/firewall/README.md, "Declared file
artefacts"): checked with `unbound-ctl check {file}` before anything changes, kept in the one
rollback point (a failed reload restores the previous file and reloads it), digested by content
(`file:unbound`). Unbound re-reads the file it was started with: FILE must be that file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from .common import JSON, HelperError, output, run
from .host import Host

UNBOUND_ARTEFACT = "unbound"
TIMEOUT = 30.0
_CONTROL_RE = re.compile(r'^\s*control-interface:\s*"?(/[^"\s]+)"?\s*$', re.MULTILINE)
_INTERFACE_RE = re.compile(r"^\s*interface:\s*([0-9.]+)\s*$", re.MULTILINE)
_PIDFILE_RE = re.compile(r'^\s*pidfile:\s*"?(/[^"\s]+)"?\s*$', re.MULTILINE)
DNS_PORT = 53
# stats_noreset keys -> the figures the portal keeps (cumulative since Unbound's start or its
# last reload: the portal turns them into rates between two samples).
FIGURES = {
    "total.num.queries": "queries",
    "total.num.cachehits": "cache_hits",
    "total.num.cachemiss": "cache_misses",
    "num.answer.rcode.SERVFAIL": "servfail",
    "total.num.queries_ip_ratelimited": "ratelimited",
    "total.recursion.time.avg": "recursion_avg_seconds",
    "total.requestlist.current.all": "requests_waiting",
    "time.up": "up_seconds",
}


class UnboundError(Exception):
    """Unbound cannot be asked (no control socket in the file, not running, an error)."""


def control_socket(config_file: str) -> str:
    """The local control socket FILE names (remote-control: control-interface: /path)."""
    text = Path(config_file).read_text(encoding="utf-8")
    found = _CONTROL_RE.search(text)
    if found is None:
        raise UnboundError(f"{config_file} names no local control-interface (a socket path)")
    return found.group(1)


def control(config_file: str, *command: str) -> str:
    """unbound-control -c FILE COMMAND...: its output, or UnboundError with its message."""
    try:
        done = run(["unbound-control", "-c", config_file, *command], timeout=TIMEOUT)
    except HelperError as exc:
        raise UnboundError(exc.message) from exc
    text = (done.stdout or "").strip()
    if done.returncode != 0 or text.startswith("error"):
        raise UnboundError(f"unbound-control {' '.join(command)}: {output(done) or text}")
    return text


def check(config_file: str) -> str:
    """unbound-checkconf FILE; the message of a refusal."""
    control_socket(config_file)
    try:
        done = run(["unbound-checkconf", config_file], timeout=TIMEOUT)
    except HelperError as exc:
        raise UnboundError(exc.message) from exc
    if done.returncode != 0:
        raise UnboundError(output(done) or "unbound-checkconf refused the file")
    return output(done)


def running_pid(config_file: str) -> int | None:
    """The pid in FILE's `pidfile:` when that process is an Unbound that runs."""
    found = _PIDFILE_RE.search(Path(config_file).read_text(encoding="utf-8"))
    try:
        pid = int(Path(found.group(1) if found else "/run/unbound.pid").read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return pid if comm == "unbound" and state != "Z" else None


def bound_addresses(pid: int) -> set[str]:
    """The IPv4 addresses on which process `pid` holds a UDP socket of port 53 (its fds'
    inodes looked up in this namespace's /proc/net/udp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for line in Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[9] in inodes:
            address, _, port = fields[1].partition(":")
            if int(port, 16) == DNS_PORT:
                raw = bytes.fromhex(address)[::-1]  # little-endian on x86
                out.add(".".join(str(b) for b in raw))
    return out


def start(config_file: str, unit: str | None) -> None:
    """Start Unbound on FILE (the unit's own start when it has one)."""
    argv = ["systemctl", "restart", unit] if unit else ["unbound", "-c", config_file]
    try:
        done = run(argv, timeout=TIMEOUT)
    except HelperError as exc:
        raise UnboundError(exc.message) from exc
    if done.returncode != 0:
        raise UnboundError(f"{' '.join(argv)}: {output(done)}")
    deadline = time.monotonic() + 10
    while running_pid(config_file) is None or not Path(control_socket(config_file)).exists():
        if time.monotonic() > deadline:
            raise UnboundError(f"Unbound did not start on {config_file}")
        time.sleep(0.05)


def restart(config_file: str, pid: int | None, unit: str | None) -> None:
    if pid is not None and not unit:
        control(config_file, "stop")
        deadline = time.monotonic() + 10
        while running_pid(config_file) == pid:
            if time.monotonic() > deadline:
                raise UnboundError(f"Unbound (pid {pid}) did not stop")
            time.sleep(0.05)
    start(config_file, unit)


def reload(config_file: str, unit: str | None = None) -> str:
    """Make Unbound serve FILE, keeping its cache where it can: what was done."""
    pid = running_pid(config_file)
    wanted = set(_INTERFACE_RE.findall(Path(config_file).read_text(encoding="utf-8")))
    if pid is None or bound_addresses(pid) != wanted:
        restart(config_file, pid, unit)
        return "restart" if pid is not None else "start"
    try:
        control(config_file, "reload_keep_cache")
        return "reload_keep_cache"
    except UnboundError as exc:
        if "unknown command" not in str(exc):
            raise
    control(config_file, "reload")
    return "reload"


def parse_stats(text: str) -> JSON:
    """`stats_noreset` key=value lines -> the portal's figures (numbers; absent keys: 0)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in FIGURES:
            try:
                values[FIGURES[key]] = float(value)
            except ValueError:
                continue
    figures: JSON = {}
    for name in FIGURES.values():
        number = values.get(name, 0.0)
        figures[name] = number if name.endswith("seconds") else int(number)
    return figures


def stats(config_file: str) -> JSON:
    return parse_stats(control(config_file, "stats_noreset"))


def resolver_figures(host: Host) -> JSON | None:
    """The health sample's `resolver` part: None when this host declares no resolver."""
    spec = host.artefacts.get(UNBOUND_ARTEFACT)
    if spec is None or not spec.path.exists():
        return None
    try:
        return {"ok": True, **stats(str(spec.path))}
    except (UnboundError, OSError) as exc:
        return {"ok": False, "error": str(exc)[:300]}


def main(argv: list[str]) -> int:
    unit = None
    if len(argv) == 4 and argv[0] == "reload" and argv[2] == "--unit":
        unit, argv = argv[3], argv[:2]
    if len(argv) != 2 or argv[0] not in {"check", "reload", "stats"}:
        sys.stderr.write(__doc__ or "")
        return 2
    verb, config_file = argv
    try:
        if verb == "check":
            check(config_file)
            return 0
        if verb == "reload":
            how = reload(config_file, unit)
            sys.stdout.write(json.dumps({"ok": True, "reload": how}) + "\n")
            return 0
        sys.stdout.write(json.dumps(stats(config_file)) + "\n")
        return 0
    except (UnboundError, OSError) as exc:
        sys.stderr.write(f"unbound-ctl: {exc}\n")
        return 1
