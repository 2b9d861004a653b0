"""Talk to the Kea DHCPv4 server named by a Kea configuration file, over its control socket.

    kea-ctl reload FILE [PREVIOUS]
                            config-reload; exit 0 only when Kea answers result 0 (it then runs
                            FILE's configuration); 3 when Kea does not answer, or refuses only
                            because its lease file cleanup runs (try again); 1 when refused. Kea re-reads the file it was started with:
                            FILE must be that file (the helper's kea-dhcp4 artefact path).
                            PREVIOUS: the configuration Kea ran before (the Kea path's last
                            loaded file, `{loaded}`): only leases of the addresses whose
                            reservation changed since are looked at; without it, every lease.
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

import contextlib
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .common import JSON, failed, refused
from .host import Host
from .leasefile import lease_file, lease_round

KEA_ARTEFACT = "kea-dhcp4"

TIMEOUT = 60.0
# Kea 2.2 refuses config-reload while kea-lfc runs (it cannot load its lease files then: seconds
# every lfc-interval at 300,000 leases); the file is fine, so the Kea path tries again (exit 3).
LFC_RUNNING = "while the lease file cleanup is in progress"


class KeaError(Exception):
    """Kea cannot be asked (no socket in the file, not answering, no answer)."""


def socket_path(config_file: str, config: JSON | None = None) -> str:
    """The control socket FILE names (`config`: FILE already parsed)."""
    try:
        if config is None:
            config = json.loads(Path(config_file).read_text(encoding="utf-8"))
        return str(config["Dhcp4"]["control-socket"]["socket-name"])
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
            # Parsed only when the text so far can be whole: parsing after every chunk made a
            # large answer quadratic (lease4-get-all of 300,000 leases: 70 s, every attempt
            # reading the whole text to find it cut off).
            if not data.rstrip().endswith((b"}", b"]")):
                continue
            try:
                answer = json.loads(b"".join(chunks))
            except ValueError:
                continue
            return _first(answer)
    if chunks:
        try:
            return _first(json.loads(b"".join(chunks)))
        except ValueError:
            pass
    raise KeaError(f"no answer to {name} from {path}")


def _first(answer: Any) -> JSON:
    first: Any = answer[0] if isinstance(answer, list) else answer
    return first if isinstance(first, dict) else {"result": None, "text": str(first)}


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


def reservations(config_file: str, config: JSON | None = None) -> dict[str, str]:
    """address -> MAC of every reservation in a Kea configuration file (`config`: parsed)."""
    if config is None:
        config = json.loads(Path(config_file).read_text(encoding="utf-8"))
    return {
        r["ip-address"]: r["hw-address"].lower()
        for subnet in config["Dhcp4"].get("subnet4", [])
        for r in subnet.get("reservations", [])
        if "ip-address" in r and "hw-address" in r
    }


def free_reserved_addresses(
    path: str, config_file: str, previous: str | None = None, config: JSON | None = None
) -> int:
    """Delete every lease of an address that is now reserved for another MAC.

    The portal frees a removed or moved device's address at once and may give it to another
    device; Kea would refuse the new owner its reservation while the old lease runs
    ("conflicting reservation ... with existing lease"). With `previous` (the configuration
    Kea ran before this reload) only the addresses whose owner changed are looked up, one
    `lease4-get` each; without it (a first load, a Kea that did not load the last file) every
    lease is read (`lease4-get-all`: 60,000 leases at 20,000 members, during which Kea answers
    no client). Returns how many leases were deleted."""
    owner = reservations(config_file, config)
    if not owner:
        return 0
    if previous is not None:
        try:
            before = reservations(previous)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            before = None
        if before is not None:
            return _free_changed(path, owner, before)
    answer = command(path, "lease4-get-all")
    deleted = 0
    for lease in (answer.get("arguments") or {}).get("leases", []):
        address, mac = lease.get("ip-address"), (lease.get("hw-address") or "").lower()
        reserved_for = owner.get(address)
        if reserved_for is not None and reserved_for != mac:
            done = command(path, "lease4-del", {"ip-address": address})
            deleted += int(done.get("result") == 0)
    return deleted


def _free_changed(path: str, owner: dict[str, str], before: dict[str, str]) -> int:
    """The leases of the addresses reserved now for another MAC than before (a new device on
    a freed address, a moved device, a MAC change): at most one lookup per such address."""
    deleted = 0
    for address, mac in sorted(owner.items()):
        if before.get(address) == mac:
            continue
        found = command(path, "lease4-get", {"ip-address": address})
        lease = found.get("arguments") or {}
        if found.get("result") != 0 or (lease.get("hw-address") or "").lower() == mac:
            continue  # no lease (result 3), or the owner's own
        done = command(path, "lease4-del", {"ip-address": address})
        deleted += int(done.get("result") == 0)
    return deleted


def main(argv: list[str]) -> int:
    if not (len(argv) == 2 or (len(argv) == 3 and argv[0] == "reload")) or argv[0] not in {
        "reload",
        "leases",
        "status",
    }:
        sys.stderr.write(__doc__)
        return 2
    verb, config_file = argv[:2]
    previous = argv[2] if len(argv) == 3 else None
    config = None
    try:
        if verb == "reload":  # read once: 4 MB at 20,000 members, 20 MB at 100,000
            try:
                config = json.loads(Path(config_file).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise KeaError(f"{config_file}: {exc}") from exc
        path = socket_path(config_file, config)
    except KeaError as exc:
        sys.stderr.write(f"kea-ctl: {exc}\n")
        return 1
    if verb == "reload":
        try:
            answer = command(path, "config-reload")
        except KeaError as exc:  # Kea stopped or hung: the Kea path tries again (deferred.py)
            sys.stderr.write(f"kea-ctl: {exc}\n")
            return 3
        if answer.get("result") != 0:
            if LFC_RUNNING in str(answer.get("text")):  # not the file: tried again soon
                sys.stderr.write(f"kea-ctl: Kea is busy: {answer.get('text')}\n")
                return 3
            sys.stderr.write(f"kea-ctl: config-reload refused: {answer.get('text')}\n")
            return 1
        freed = free_reserved_addresses(path, config_file, previous, config)
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


def leases_since(socket_name: str, path: Path | None, since: tuple[int, int, int] | None) -> JSON:
    """One round of leases: what changed since the cursor `since` (inode, offset, check), read
    from Kea's lease files, or every lease from Kea (`leasefile.lease_round`)."""
    return lease_round(path, since, lambda: leases(socket_name))


def dhcp_leases(host: Host, args: JSON) -> JSON:
    """The `dhcp-leases` verb: the leases of this host's Kea (its declared kea-dhcp4 file
    names the control socket and the lease file). With `since_inode`, `since_offset` and
    `since_check` (the cursor of the portal's last stored round): only what changed since
    (`leases_since`)."""
    spec = host.artefacts.get(KEA_ARTEFACT)
    if spec is None:
        raise refused(f"this host declares no {KEA_ARTEFACT} artefact (--artefacts)")
    if not spec.path.exists():
        raise failed(f"{spec.path} is missing: no DHCP pushed yet")
    inode, offset, fingerprint = (
        args.get(n) for n in ("since_inode", "since_offset", "since_check")
    )
    given = [v is not None for v in (inode, offset, fingerprint)]
    if any(given) and not all(given):
        raise refused("dhcp-leases: since_inode, since_offset and since_check go together")
    since = None
    if inode is not None and offset is not None and fingerprint is not None:
        since = (inode, offset, fingerprint)
    try:
        sock, path = kea_paths(host, spec.path)
        answer = leases_since(sock, path, since)
    except (KeaError, OSError, ValueError) as exc:
        raise failed("Kea did not list its leases", str(exc)) from exc
    return {**answer, "now": time.time()}


def kea_paths(host: Host, config_file: Path) -> tuple[str, Path | None]:
    """The control socket and the lease file Kea's configuration names, remembered in the
    state directory for the file as it is (inode, size, mtime): the configuration holds every
    reservation (20 MB at 100,000 members, 0.13 s to parse), a round from the cursor almost
    nothing."""
    st = config_file.stat()
    key = [st.st_ino, st.st_size, st.st_mtime_ns]
    remembered = host.read_json(host.state_dir / "kea-paths.json") or {}
    if remembered.get("key") == key and isinstance(remembered.get("socket"), str):
        lease = remembered.get("lease_file")
        return remembered["socket"], Path(lease) if isinstance(lease, str) else None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    sock, path = socket_path(str(config_file), config), lease_file(config)
    with contextlib.suppress(OSError):  # (no state directory: parsed again next time)
        host.write_json(host.state_dir / "kea-paths.json", {
            "key": key, "socket": sock, "lease_file": str(path) if path else None})  # fmt: skip
    return sock, path
