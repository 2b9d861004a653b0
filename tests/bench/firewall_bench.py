"""Database -> snapshot -> nft text for seed_demo databases, against a COPY floor.

Run by tests/bench/run.py in a subprocess with DATABASE_URL set; prints one JSON object.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tempfile
import time
import tracemalloc

import django


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


def nft_load_seconds(text: str) -> float:
    """`nft -f` of the text into a fresh network namespace (created and removed here)."""
    ns = f"pl-cdb{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".nft") as handle:
            handle.write(text)
            handle.flush()
            start = time.perf_counter()
            subprocess.run(
                ["ip", "netns", "exec", ns, "nft", "-f", handle.name], check=True, timeout=120
            )
            return time.perf_counter() - start
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.apps import apps

    from apps.firewall.models import FirewallHost
    from apps.firewall.selectors import (
        firewall_snapshot_build,
        snapshot_cache_clear,
        snapshot_data_read,
    )
    from apps.members.models import Member
    from apps.network.models import PortForward
    from workers.ruleset import compile_snapshot

    host = FirewallHost(name="bench", address="127.0.0.1")

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
    from django.db import connection, transaction

    snapshot_cache_clear()
    snapshot_data_read()
    forward_id = PortForward.objects.filter(enabled=True, member__status="active").values_list(
        "id", flat=True
    )[0]

    def one_change() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE network_portforward SET enabled = NOT enabled WHERE id = %s", [forward_id]
            )

    warm_read_times, warm_total_times = [], []
    for _ in range(3):
        one_change()
        start = time.perf_counter()
        warm = firewall_snapshot_build(host=host, data=snapshot_data_read())
        warm_read_times.append(time.perf_counter() - start)
        compile_snapshot(warm)
        warm_total_times.append(time.perf_counter() - start)
    one_change()
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
                "nft_load": nft_load_seconds(compiled.nft),
            }
        )
    )


if __name__ == "__main__":
    main()
