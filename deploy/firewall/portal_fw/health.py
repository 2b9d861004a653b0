"""Health sampling: conntrack fill and statistics, softirq per CPU, load, interfaces, who hit a
conntrack quota, the version and confirm state, the pair's daemons (ha.py's status), and
whether Kea answers (kea.py's dhcp_status, hosts that declare the kea-dhcp4 artefact).

Read from /proc of the host's (or lab namespace's) network namespace; softirq shares are
fractions of each CPU's time over the sample (0 ms: no sample).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from . import deferred, kea, offload
from .common import JSON, failed, now_iso, output, refused
from .digest import public_digest
from .host import Host
from .netlink import DumpInterrupted, NetlinkError
from .unbound import resolver_figures


def pending_summary(pending: JSON | None) -> JSON | None:
    if not pending:
        return None
    return {
        "armed_at": pending.get("armed_at"),
        "seconds_left": round(max(0.0, pending["deadline"] - time.time()), 1),
        "sha256": pending.get("sha256"),
        "version": pending.get("version"),
    }


def read_cpu_times() -> dict[str, list[int]]:
    cpus: dict[str, list[int]] = {}
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("cpu"):
                name, *values = line.split()
                cpus[name] = [int(v) for v in values]
    return cpus


def read_interfaces() -> dict[str, dict[str, int]]:
    fields = [
        "rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo", "rx_frame",
        "rx_compressed", "rx_multicast", "tx_bytes", "tx_packets", "tx_errors", "tx_dropped",
        "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
    ]  # fmt: skip
    keep = {"rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "tx_bytes", "tx_packets",
            "tx_errors", "tx_dropped"}  # fmt: skip
    result: dict[str, dict[str, int]] = {}
    with open("/proc/net/dev", encoding="ascii") as fh:
        for line in fh.readlines()[2:]:
            name, _, rest = line.partition(":")
            values = [int(v) for v in rest.split()]
            result[name.strip()] = {k: v for k, v in zip(fields, values, strict=False) if k in keep}
    return result


CONNTRACK_STATS = ("drop", "early_drop", "insert_failed", "invalid")


def read_conntrack_stats() -> dict[str, int]:
    """The conntrack statistics that tell a full or flooded table, summed over the CPUs
    (/proc/net/stat/nf_conntrack: one hex row per CPU)."""
    try:
        lines = Path("/proc/net/stat/nf_conntrack").read_text().split("\n")
    except OSError:
        return {}
    header = lines[0].split()
    totals = dict.fromkeys(CONNTRACK_STATS, 0)
    for line in lines[1:]:
        values = line.split()
        if len(values) != len(header):
            continue
        for name in CONNTRACK_STATS:
            if name in header:
                totals[name] += int(values[header.index(name)], 16)
    return totals


QUOTA_HIT_SETS = ("quota_hit4", "quota_hit6")


def read_quota_hits(host: Host, limit: int = 50) -> list[JSON]:
    """Who hit a conntrack quota in the last hour (the rule set's dynamic quota_hit sets): the
    member's public IPv4 or /64 and the packets dropped, most first. Over the agent's netlink
    socket (no nft process; `nft -j` when netlink fails or --digest-source nft)."""
    from .traffic import counted_elements, read_counted_netlink

    hits: list[tuple[int, str]] = []
    counted_sets: dict[str, dict[str, tuple[int, int]]] | None = None
    if host.digest_source != "nft":
        try:
            read = read_counted_netlink(host.netlink(), f"{host.prefix}fw", QUOTA_HIT_SETS)
            counted_sets = {
                name: {k: (v[0], v[1]) for k, v in c.items()} for name, c in read.items()
            }
        except (NetlinkError, DumpInterrupted, OSError, ValueError):
            host.drop_netlink()
    if counted_sets is None:
        counted_sets = {name: counted_elements(host, name, timeout=20) or {}
                        for name in QUOTA_HIT_SETS}  # fmt: skip
    for counted in counted_sets.values():
        hits += [(packets, key) for key, (packets, _) in counted.items()]
    hits.sort(key=lambda hit: (-hit[0], hit[1]))
    return [{"address": key, "packets": packets} for packets, key in hits[:limit]]


def read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def collect(
    host: Host,
    sample_ms: int,
    *,
    digest: JSON | None = None,
    ha: HaStatus | None = None,
) -> JSON:
    """The `health` answer; softirq shares over `sample_ms` (0: no sample, no shares).
    ``digest``: the content digest to report. ``ha``: the pair's status, started earlier."""
    started = time.monotonic()
    before = read_cpu_times() if sample_ms else {}
    if sample_ms:
        time.sleep(sample_ms / 1000)
    after = read_cpu_times() if sample_ms else {}
    per_cpu: list[JSON] = []
    for name, values in after.items():
        if name == "cpu" or name not in before:
            continue
        delta = [a - b for a, b in zip(values, before[name], strict=False)]
        total = sum(delta[:8]) or 1  # user nice system idle iowait irq softirq steal
        per_cpu.append(
            {
                "cpu": int(name[3:]),
                "softirq": round(delta[6] / total, 4),
                "irq": round(delta[5] / total, 4),
                "busy": round(1 - (delta[3] + delta[4]) / total, 4),
            }
        )
    count = read_int("/proc/sys/net/netfilter/nf_conntrack_count")
    maximum = read_int("/proc/sys/net/netfilter/nf_conntrack_max")
    load = Path("/proc/loadavg").read_text().split()
    state = host.state()
    pending = host.read_json(host.pending_file)
    answer: JSON = {
        "time": now_iso(),
        "uptime_seconds": float(Path("/proc/uptime").read_text().split()[0]),
        "conntrack": {
            "count": count,
            "max": maximum,
            "buckets": read_int("/proc/sys/net/netfilter/nf_conntrack_buckets"),
            "ratio": round(count / maximum, 6) if count is not None and maximum else None,
            "stats": read_conntrack_stats(),
            "quota_hits": read_quota_hits(host),
            "offloaded": offload.offloaded(),  # flows on the fast path ([OFFLOAD])
        },
        "softirq": {
            "sample_ms": sample_ms,
            "per_cpu": per_cpu,
            "max_share": max((c["softirq"] for c in per_cpu), default=0.0),
        },
        "loadavg": [float(x) for x in load[:3]],
        "interfaces": read_interfaces(),
        "version": state.get("version"),
        "confirmed": state.get("confirmed"),
        "pending_confirm": pending_summary(pending),
        "collect_seconds": round(time.monotonic() - started, 3),
    }
    resolver = resolver_figures(host)  # the members' resolver (Unbound), when declared
    if resolver is not None:
        answer["resolver"] = resolver
    if ha is not None:
        answer["ha"] = ha.finish()
    elif is_paired(host):
        answer["ha"] = HaStatus(host).run_now()
    kea_spec = host.artefacts.get(kea.KEA_ARTEFACT)
    if kea_spec is not None:
        if kea_spec.deferred and deferred.busy(host, kea.KEA_ARTEFACT):
            # Kea answers nothing while it reloads (4.9 s at 100,000 members): the sample says
            # so instead of waiting for its socket (a push's answer carries this sample).
            answer["dhcp"] = {"answering": True, "reloading": True}
        else:
            answer["dhcp"] = kea.dhcp_status(str(kea_spec.path))
        if kea_spec.deferred:
            answer["dhcp"]["config"] = deferred.status(host, kea.KEA_ARTEFACT)
    if digest is not None:
        answer["digest"] = public_digest(digest)
        recorded = ((state.get("digest") or {}).get("parts")) or {}
        if recorded and digest.get("parts"):
            keys = set(recorded) | set(digest["parts"])
            answer["digest_differs"] = sorted(
                k for k in keys if recorded.get(k) != digest["parts"].get(k)
            )
    return answer


def is_paired(host: Host) -> bool:
    """The host runs keepalived or conntrackd for the portal (it declares their files)."""
    return "conntrackd" in host.artefacts or "keepalived" in host.artefacts


class HaStatus(threading.Thread):
    """The pair's state on this host (ha.status: VRRP state per instance, whether keepalived and
    conntrackd run, conntrackd's sync statistics), read in a thread: apply-bundle runs it
    alongside its apply when no daemon's configuration changes."""

    def __init__(self, host: Host) -> None:
        super().__init__(name="ha-status", daemon=True)
        spec = host.artefacts.get("conntrackd")
        self.conf = spec.path if spec else Path("/etc/conntrackd/conntrackd.conf")
        self.run_dir = host.ha_run_dir
        self.answer: JSON = {"error": "the pair's status did not answer within 20 s"}

    def run(self) -> None:
        from . import pair

        try:
            self.answer = pair.status(self.conf, self.run_dir)
        except Exception as exc:  # reported in the answer: never fatal to an apply
            self.answer = {"error": f"the pair's status failed: {exc}"[:300]}

    def run_now(self) -> JSON:
        self.run()
        return self.answer

    def finish(self) -> JSON:
        self.join(timeout=20)
        return self.answer


def health(host: Host, args: JSON) -> JSON:
    """The `health` verb: a sample, with the content digest unless `no_digest`."""
    from .digest import digest_or_error

    digest = None if args.get("no_digest") else digest_or_error(host)
    return collect(host, int(args.get("sample_ms", 200)), digest=digest)


def ha_resync(host: Host, args: JSON) -> JSON:
    """Ask the peer's conntrackd for a full resync of the connection states (staff action)."""
    from . import pair

    spec = host.artefacts.get("conntrackd")
    if spec is None:
        raise refused("this host declares no conntrackd artefact (--artefacts)")
    result = pair.conntrackd(spec.path, "-n")
    if result.returncode != 0:
        raise failed("conntrackd refused the resync", output(result))
    host.log({"event": "resync-requested"})
    return {"resync": "requested", "ha": HaStatus(host).run_now()}
