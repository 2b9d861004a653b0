"""Talk to the Kea DHCPv4 server named by a Kea configuration file, over its control socket.

    kea-ctl reload FILE     config-reload; exit 0 only when Kea answers result 0 (it then runs
                            FILE's configuration). Kea re-reads the file it was started with:
                            FILE must be that file (the helper's kea-dhcp4 artefact path).
    kea-ctl leases FILE     every lease Kea holds, as one JSON object on stdout:
                            {"leases": [[address, mac, cltt, valid_lft, hostname, state], ...]}
    kea-ctl status FILE     {"pid": N, "uptime": S, "reload": S} (status-get)

The health verb reads `dhcp_status` (below) with every sample: whether Kea answers at all, and
how many DHCP requests it received and answered since it started (the DhcpNotAnswering rule).

The socket path is read from FILE (Dhcp4.control-socket.socket-name). The entry point `kea-ctl`
(a launcher beside the package) is the reload command of the kea-dhcp4 artefact; the agent's
`dhcp-leases` verb asks Kea in-process.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .common import JSON, failed, refused
from .host import Host

KEA_ARTEFACT = "kea-dhcp4"

TIMEOUT = 60.0


class KeaError(Exception):
    """Kea cannot be asked (no socket in the file, not answering, no answer)."""


def socket_path(config_file: str) -> str:
    text = Path(config_file).read_text(encoding="utf-8")
    try:
        return str(json.loads(text)["Dhcp4"]["control-socket"]["socket-name"])
    except (ValueError, KeyError, TypeError) as exc:
        raise KeaError(f"{config_file} names no Dhcp4 control socket ({exc})") from exc


def command(
    path: str, name: str, arguments: JSON | None = None, *, timeout: float = TIMEOUT
) -> JSON:
    request: JSON = {"command": name}
    if arguments is not None:
        request["arguments"] = arguments
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            raise KeaError(f"Kea is not answering on {path}: {exc}") from exc
        sock.sendall(json.dumps(request).encode())
        chunks = []
        while True:  # Kea closes the connection after its answer
            data = sock.recv(1 << 20)
            if not data:
                break
            chunks.append(data)
            try:
                answer = json.loads(b"".join(chunks))
            except ValueError:
                continue
            first: Any = answer[0] if isinstance(answer, list) else answer
            return first if isinstance(first, dict) else {"result": None, "text": str(first)}
    raise KeaError(f"no answer to {name} from {path}")


# Kea's packet statistics (statistic-get-all): what clients asked and what Kea answered.
REQUEST_STATS = ("pkt4-discover-received", "pkt4-request-received")
ANSWER_STATS = ("pkt4-offer-sent", "pkt4-ack-sent", "pkt4-nak-sent")
STATUS_TIMEOUT = 3.0  # Kea serves its control socket in the loop that answers DHCP: a hung
# Kea answers neither, and the health sample must not wait for it


def _stat(stats: JSON, name: str) -> int:
    """The newest value of a Kea statistic ([[value, time], ...]), 0 when absent."""
    samples = stats.get(name) or []
    try:
        return int(samples[0][0])
    except (IndexError, TypeError, ValueError):
        return 0


def dhcp_status(config_file: str) -> JSON:
    """Does this host's Kea answer? `answering`: it answers status-get on its control socket
    (the same loop that answers clients) and has not given up opening its DHCP sockets;
    `requests` / `answers`: DISCOVER + REQUEST received and OFFER + ACK + NAK sent since Kea
    started (requests rising while answers stay flat: Kea hears clients but answers none)."""
    try:
        path = socket_path(config_file)
        status = command(path, "status-get", timeout=STATUS_TIMEOUT)
        if status.get("result") != 0:
            raise KeaError(f"status-get refused: {status.get('text')}")
        stats = command(path, "statistic-get-all", timeout=STATUS_TIMEOUT)
    except (KeaError, OSError) as exc:
        return {"answering": False, "error": str(exc)[:300]}
    arguments = status.get("arguments") or {}
    sockets = str((arguments.get("sockets") or {}).get("status") or "ready")
    values = stats.get("arguments") or {}
    answer: JSON = {
        "answering": sockets != "failed",
        "sockets": sockets,
        "uptime": arguments.get("uptime"),
        "requests": sum(_stat(values, name) for name in REQUEST_STATS),
        "answers": sum(_stat(values, name) for name in ANSWER_STATS),
    }
    if sockets == "failed":
        errors = (arguments.get("sockets") or {}).get("errors") or []
        answer["error"] = ("Kea could not open its DHCP sockets: " + "; ".join(map(str, errors)))[
            :300
        ]
    return answer


def free_reserved_addresses(path: str, config_file: str) -> int:
    """Delete every lease of an address that is now reserved for another MAC.

    The portal frees a removed or moved device's address at once and may give it to another
    device; Kea would refuse the new owner its reservation while the old lease runs
    ("conflicting reservation ... with existing lease"). Returns how many leases were deleted."""
    config = json.loads(Path(config_file).read_text(encoding="utf-8"))
    owner = {
        r["ip-address"]: r["hw-address"].lower()
        for subnet in config["Dhcp4"].get("subnet4", [])
        for r in subnet.get("reservations", [])
        if "ip-address" in r and "hw-address" in r
    }
    if not owner:
        return 0
    answer = command(path, "lease4-get-all")
    deleted = 0
    for lease in (answer.get("arguments") or {}).get("leases", []):
        address, mac = lease.get("ip-address"), (lease.get("hw-address") or "").lower()
        reserved_for = owner.get(address)
        if reserved_for is not None and reserved_for != mac:
            done = command(path, "lease4-del", {"ip-address": address})
            deleted += int(done.get("result") == 0)
    return deleted


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"reload", "leases", "status"}:
        sys.stderr.write(__doc__)
        return 2
    verb, config_file = argv
    try:
        path = socket_path(config_file)
    except KeaError as exc:
        sys.stderr.write(f"kea-ctl: {exc}\n")
        return 1
    if verb == "reload":
        answer = command(path, "config-reload")
        if answer.get("result") != 0:
            sys.stderr.write(f"kea-ctl: config-reload refused: {answer.get('text')}\n")
            return 1
        freed = free_reserved_addresses(path, config_file)
        sys.stdout.write(
            json.dumps({"ok": True, "text": answer.get("text"), "leases_deleted": freed}) + "\n"
        )
        return 0
    if verb == "status":
        answer = command(path, "status-get")
        args = answer.get("arguments") or {}
        sys.stdout.write(json.dumps({k: args.get(k) for k in ("pid", "uptime", "reload")}) + "\n")
        return 0 if answer.get("result") == 0 else 1
    try:
        rows = leases(path)
    except KeaError as exc:
        sys.stderr.write(f"kea-ctl: {exc}\n")
        return 1
    sys.stdout.write(json.dumps({"leases": rows}, separators=(",", ":")) + "\n")
    return 0


def leases(path: str) -> list[list[Any]]:
    """Every lease Kea holds: [address, mac, cltt, valid_lft, hostname, state] rows."""
    answer = command(path, "lease4-get-all")
    if answer.get("result") not in (0, 3):  # 3: empty
        raise KeaError(f"lease4-get-all refused: {answer.get('text')}")
    return [
        [
            lease.get("ip-address"),
            lease.get("hw-address"),
            lease.get("cltt"),
            lease.get("valid-lft"),
            lease.get("hostname") or "",
            lease.get("state", 0),
        ]
        for lease in (answer.get("arguments") or {}).get("leases", [])
    ]


def dhcp_leases(host: Host, args: JSON) -> JSON:
    """The `dhcp-leases` verb: the leases of this host's Kea (its declared kea-dhcp4 file
    names the control socket)."""
    spec = host.artefacts.get(KEA_ARTEFACT)
    if spec is None:
        raise refused(f"this host declares no {KEA_ARTEFACT} artefact (--artefacts)")
    if not spec.path.exists():
        raise failed(f"{spec.path} is missing: no DHCP pushed yet")
    try:
        rows = leases(socket_path(str(spec.path)))
    except (KeaError, OSError) as exc:
        raise failed("Kea did not list its leases", str(exc)) from exc
    return {"leases": rows, "now": time.time()}
