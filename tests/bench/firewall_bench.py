"""Database -> snapshot -> nft text for seed_demo databases, against a COPY floor.

Run by tests/bench/run.py in a subprocess with DATABASE_URL set; prints one JSON object.
With `--delta`, only the delta path's figures (`delta_bench`), without namespaces.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import django

from tests.bench.ruleset_bench import _host_links, _run, _write, namespaces


def best(fn, rounds: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def copy_floor(tables: list[str]) -> float:
    """Seconds to stream the involved tables with plain COPY ... TO STDOUT (the floor)."""
    from django.db import connection

    def run() -> None:
        with connection.cursor() as cursor:
            raw = cursor.cursor
            for table in tables:
                sink = io.BytesIO()
                with raw.copy(f"COPY {table} TO STDOUT") as copy:
                    for block in copy:
                        sink.write(block)

    seconds, _ = best(run)
    return seconds


def rss_mb() -> float:
    """Resident set size of this process now (MB), from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def host_apply(snap_host, full, add_step, class_step, reshaped) -> dict[str, float]:
    """On a fresh namespace (pl-cbdb*) with the host's links: `nft -f` of the full text and the
    full tc batch (the first load after a boot: the tree built anew), the next full tree (one
    class changed) the way the host agent loads a full tree (it keeps the tree:
    tests.bench.tc_keep_load), then the one-element increment (and its reverse, so the next
    round adds again) and the one-class tc change (forth and back), five times each."""
    ns = f"pl-cbdb{os.getpid() % 1000}"
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pl-cbench-") as tmp, namespaces(ns):
        _host_links(ns, snap_host, queues=snap_host.tx_queues)
        full_nft = _write(tmp, "full.nft", full.nft)
        start = time.perf_counter()
        _run("nft", "-f", full_nft, ns=ns, timeout=300)
        result["nft_load"] = time.perf_counter() - start
        full_tc = _write(tmp, "full.tc", full.tc)
        start = time.perf_counter()
        _run("tc", "-batch", full_tc, ns=ns, timeout=900)
        result["tc_load"] = time.perf_counter() - start
        agent = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.bench.tc_keep_load",
             _write(tmp, "next.tc", reshaped.tc), os.path.join(tmp, "agent")],
            check=True, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        keep = json.loads(agent.stdout.strip().splitlines()[-1])
        result["tc_keep"], result["tc_keep_plan"] = keep["wall"], keep["plan"]
        result["tc_keep_kept"] = len(keep["kept"])
        forth = _write(tmp, "add.nft", add_step[0].nft)
        back = _write(tmp, "del.nft", add_step[1].nft)
        adds = []
        for _ in range(5):
            start = time.perf_counter()
            _run("nft", "-f", forth, ns=ns)
            adds.append(time.perf_counter() - start)
            _run("nft", "-f", back, ns=ns)
        result["add_best"], result["add_median"] = min(adds), statistics.median(adds)
        files = [_write(tmp, f"class{k}.tc", step.tc) for k, step in enumerate(class_step)]
        changes = []
        for _ in range(5):
            for path in files:
                start = time.perf_counter()
                _run("tc", "-batch", path, ns=ns)
                changes.append(time.perf_counter() - start)
        result["class_best"] = min(changes)
        result["class_median"] = statistics.median(changes)
    return result


def delta_bench(
    host, forward_id: int, one_change, buildings: set[int] | None = None
) -> dict[str, object]:
    """The delta path (workers/ruleset/delta.py): the base built from a full compile, then
    one member's change compiled from that member alone: read by id + its increment, ten
    rounds (a forward switched off and on); the base's digest is then compared with a fresh
    full compile's."""
    from apps.firewall.snapshot import (
        firewall_snapshot_build,
        snapshot_data_read,
        snapshot_members_read,
    )
    from apps.network.models import PortForward
    from workers.ruleset import build
    from workers.ruleset.delta import DeltaBase, content_digest, delta_step

    member_id = PortForward.objects.get(pk=forward_id).member_id
    snap = firewall_snapshot_build(host=host, data=snapshot_data_read())
    ruleset = build(snap)
    start = time.perf_counter()
    base = DeltaBase.from_ruleset(snap, ruleset)
    base_seconds = time.perf_counter() - start
    start = time.perf_counter()
    content_digest(ruleset)
    digest_seconds = time.perf_counter() - start
    totals, reads, elements = [], [], 0
    for _ in range(10):  # an even number: the forward ends enabled
        one_change()
        start = time.perf_counter()
        changed = snapshot_members_read([member_id], buildings=buildings)
        read = time.perf_counter() - start
        step = delta_step(base, changed)
        totals.append(time.perf_counter() - start)
        reads.append(read)
        elements = max(elements, step.added + step.deleted)
    fresh = build(firewall_snapshot_build(host=host, data=snapshot_data_read()))
    return {
        "delta_best": min(totals),
        "delta_median": statistics.median(totals),
        "delta_read_median": statistics.median(reads),
        "delta_elements": elements,
        "delta_base": base_seconds,
        "delta_digest": digest_seconds,
        "delta_equal": base.digest == content_digest(fresh),
    }


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.apps import apps
    from django.db.models import F

    from apps.firewall.models import FirewallHost
    from apps.firewall.snapshot import (
        firewall_snapshot_build,
        snapshot_cache_clear,
        snapshot_data_read,
    )
    from apps.members.models import Member
    from apps.network.models import PortForward
    from workers.ruleset import compile_snapshot, diff
    from workers.ruleset.snapshot import Shaping, Snapshot

    # Above 50,000 members the HTB tree (two classes per shaped member) loads in O(n^2) under one
    # root: the bench host uses the mq layout with 8 queues there, as a big site would.
    big = Member.objects.count() > 50_000
    host = FirewallHost(name="bench", address="127.0.0.1")
    if big:
        host = FirewallHost(name="bench", address="127.0.0.1", shaping_root="mq", tx_queues=8)

    # The worker's memory: its process before any read, after the first (caching) read, and
    # after a warm read with one member changed (what a worker holds between rounds).
    from django.db import connection, transaction

    forward_id = (
        PortForward.objects.filter(
            enabled=True, member__status="active", public_first=F("public_last")
        )
        .order_by("id")
        .values_list("id", flat=True)[0]
    )

    def one_change() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE network_portforward SET enabled = NOT enabled WHERE id = %s", [forward_id]
            )

    if "--delta" in sys.argv:  # the delta path alone (no namespace, seconds instead of minutes)
        print(json.dumps(delta_bench(host, forward_id, one_change)))  # noqa: T201
        return

    rss_base = rss_mb()
    snapshot_cache_clear()
    snapshot_data_read()
    one_change()
    firewall_snapshot_build(host=host, data=snapshot_data_read())
    rss_warm = rss_mb()
    one_change()

    def cold_read():
        return firewall_snapshot_build(host=host, data=snapshot_data_read(cached=False))

    db_seconds, data = best(cold_read)
    compile_seconds, compiled = best(lambda: compile_snapshot(data))
    total, compiled = best(lambda: compile_snapshot(cold_read()))
    tracemalloc.start()
    compile_snapshot(cold_read())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    # The worker's steady state: its cache holds the typed members of the last compile, and
    # one member changed since (a forward switched off and on again between rounds).
    snapshot_cache_clear()
    snapshot_data_read()
    warm_read_times, warm_total_times = [], []
    for _ in range(3):
        one_change()
        start = time.perf_counter()
        warm = firewall_snapshot_build(host=host, data=snapshot_data_read())
        warm_read_times.append(time.perf_counter() - start)
        compile_snapshot(warm)
        warm_total_times.append(time.perf_counter() - start)
    one_change()  # an even number of switches: the forward is enabled again

    # One change on the host: the forward's element added (and removed again between rounds),
    # and one shaped member's class replaced, on top of the full rule set and tc tree.
    one_change()
    without = compile_snapshot(firewall_snapshot_build(host=host, data=snapshot_data_read()))
    one_change()
    with_snap = firewall_snapshot_build(host=host, data=snapshot_data_read())
    full = compile_snapshot(with_snap)
    add_step = (diff(without, full), diff(full, without))
    idx = max(i for i, m in enumerate(with_snap.members) if m.shaping is not None)
    member = dataclasses.replace(with_snap.members[idx], shaping=Shaping(24_000, 6_000))
    members = (*with_snap.members[:idx], member, *with_snap.members[idx + 1 :])
    reshaped = compile_snapshot(Snapshot(with_snap.policy, with_snap.host, members))
    class_step = (diff(full, reshaped), diff(reshaped, full))
    if None in add_step or None in class_step:
        raise RuntimeError("one forward or one class should be an incremental change")
    applied = host_apply(with_snap.host, full, add_step, class_step, reshaped)
    delta = delta_bench(host, forward_id, one_change)
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    tables = [Member._meta.db_table, "members_room"]
    for label in (
        "network.Device",
        "network.PublicAddress",
        "network.PortForward",
        "network.Ipv6Opening",
        "network.PublicPool",
        "network.Subnet",
    ):
        try:
            tables.append(apps.get_model(label)._meta.db_table)
        except LookupError:
            continue
    existing = set(connection.introspection.table_names())
    tables = [t for t in tables if t in existing]
    floor = copy_floor(tables)
    elements = sum(v for k, v in compiled.counts.items() if "." in k and k.startswith("portal"))
    print(  # noqa: T201
        json.dumps(
            {
                "members": len(data.members),
                "devices": sum(len(m.devices) for m in data.members),
                "forwards": sum(len(m.forwards) for m in data.members),
                "openings": sum(len(m.openings) for m in data.members),
                "shaped": sum(1 for m in data.members if m.shaping),
                "elements": elements,
                "db_to_snapshot": db_seconds,
                "snapshot_to_text": compile_seconds,
                "db_to_text": total,
                "warm_db_to_snapshot": min(warm_read_times),
                "warm_db_to_text": min(warm_total_times),
                "copy_floor": floor,
                "tables": tables,
                "peak_mb": peak / 1e6,
                "text_mb": compiled.size / 1e6,
                "tc_mb": len(compiled.tc) / 1e6,
                "classes": compiled.counts["htb.classes"],
                "shaping": f"{host.shaping_root} x{host.tx_queues}" if big else host.shaping_root,
                "rss_base_mb": rss_base,
                "rss_warm_mb": rss_warm,
                "rss_per_member_kb": (rss_warm - rss_base) * 1024 / max(len(data.members), 1),
                "rss_peak_mb": rss_peak,
                "add_elements": add_step[0].added,
                "add_bytes": len(add_step[0].nft),
                "class_lines": class_step[0].classes_changed,
                **applied,
                **delta,
            }
        )
    )


if __name__ == "__main__":
    main()
