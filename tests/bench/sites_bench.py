"""Sites: 100,000 members across 5 sites of 20,000 (seed_demo --sites 5), portal-wide figures
(one traffic reading of every host, the health samples of a round, one lease reading of every
host) and one site's steady compile of a member's change.

Run by tests/bench/run.py in a subprocess with DATABASE_URL set to the seed_demo database of
100,000 members with its five sites demo-1 .. demo-5 (two hosts each); prints one JSON object.

Method. Traffic: each site's devices (its buildings' members) give the keys a pair reads: fw1
(the IPv4 primary) counts every device IPv4 in and out, fw2 (the IPv6 primary) every member /64
in and out; every key has traffic. Each host's answer is the JSON the helper's verb sends; the
portal's time for a host is the answer's parse (json + traffic_reply_parse) plus traffic_store.
A first reading (every key new), then a next one (every key changed): the sum over the ten
hosts is the portal time of one interval. Health: one sample per host stored through the health
service's store (ten rows per round, whatever the member count). Leases: see `leases` (every
networked device's lease, read from the pair's two hosts; every 15 s in production). Compile: the worker's steady
state as in "Firewall compile from the database" (the cache warm, one forward switched, then
database -> snapshot and database -> text for one host), for a host of demo-1 (20,000 members
in its site, 100,000 portal-wide) and for a host serving every building (100,000 in its site).
"""

from __future__ import annotations

import ipaddress
import json
import os
import statistics
import time

import django


def traffic(sites) -> dict:
    from django.utils import timezone

    from apps.firewall.models import FirewallHost
    from apps.network.models import Device
    from apps.traffic.models import TrafficBucket, TrafficCounter
    from apps.traffic.services import traffic_reply_parse, traffic_store

    answers: list[tuple[FirewallHost, dict, dict]] = []
    for site in sites:
        fw1, fw2 = FirewallHost.objects.filter(site=site).order_by("name")[:2]
        v4, v6 = [], set()
        for ipv4, ipv6 in Device.objects.filter(
            member__room__building__in=site.buildings.all()
        ).values_list("ipv4", "ipv6"):
            v4.append(str(ipv4))
            if ipv6:
                v6.add(str(ipaddress.IPv6Network(f"{ipv6}/64", strict=False).network_address))
        nets = sorted(v6)
        for host, sets in (
            (fw1, {"acct4_in": [[k, 100, 150_000] for k in v4],
                   "acct4_out": [[k, 50, 20_000] for k in v4]}),
            (fw2, {"acct6n_in": [[k, 100, 300_000] for k in nets],
                   "acct6n_out": [[k, 40, 30_000] for k in nets]}),
        ):  # fmt: skip
            first = {"epoch": "b1", "sets": sets}
            bigger = {
                "epoch": "b1",
                "sets": {n: [[k, p * 2, o * 2] for k, p, o in rows] for n, rows in sets.items()},
            }
            answers.append((host, first, bigger))
    hosts = [h for h, _, _ in answers]
    TrafficCounter.objects.filter(host__in=hosts).delete()
    TrafficBucket.objects.filter(site__in=sites).delete()
    now = timezone.now()
    out: dict = {"hosts": len(answers), "keys": 0}
    for label, pick in (("first", 1), ("next", 2)):
        parse_s = store_s = worst = 0.0
        for host, *readings in answers:
            text = json.dumps(readings[pick - 1])
            start = time.perf_counter()
            epoch, rows, _skipped = traffic_reply_parse(json.loads(text))
            parsed = time.perf_counter()
            traffic_store(host=host, epoch=epoch, rows=rows, now=now)
            done = time.perf_counter()
            parse_s += parsed - start
            store_s += done - parsed
            worst = max(worst, done - start)
            if pick == 1:
                out["keys"] += len(rows)
        out[label] = {"parse": parse_s, "store": store_s, "worst_host": worst}
    out["buckets"] = TrafficBucket.objects.filter(site__in=sites).count()
    out["counters"] = TrafficCounter.objects.filter(host__in=hosts).count()
    TrafficCounter.objects.filter(host__in=hosts).delete()
    TrafficBucket.objects.filter(site__in=sites).delete()
    return out


def leases(sites) -> dict:
    """One lease reading of every host: each site's networked devices hold a lease (their
    reserved address, 1 h), split between the pair's two hosts (both answer; whichever answered
    first holds the lease). The answer as the helper's `dhcp-leases` verb sends it, parsed
    (lease_rows_parse) and merged (leases_store), per host: a first reading (every lease new),
    the same leases again (the common case every 15 s: nothing renewed), then every lease
    renewed (the worst case: a mass reconnect)."""
    from django.conf import settings
    from django.utils import timezone

    from apps.dhcp.models import Lease, LeaseCursor
    from apps.dhcp.services import lease_round_store, lease_rows_parse, leases_store
    from apps.firewall.models import FirewallHost
    from apps.members.choices import NETWORKED_STATUSES
    from apps.network.models import Device

    now = int(timezone.now().timestamp())
    answers: list[tuple[FirewallHost, list]] = []
    for site in sites:
        pair = list(FirewallHost.objects.filter(site=site).order_by("name")[:2])
        held: list[list] = [[], []]
        devices = Device.objects.filter(
            member__room__building__in=site.buildings.all(),
            member__status__in=NETWORKED_STATUSES,
            ipv4__isnull=False,
        ).order_by("id")
        for i, (ipv4, mac, name) in enumerate(devices.values_list("ipv4", "mac", "name")):
            held[i % 2].append([str(ipv4), str(mac), now - 600, 3600, name, 0])
        answers += [(host, rows) for host, rows in zip(pair, held, strict=True)]
    names = [h.name for h, _ in answers]
    Lease.objects.filter(host_name__in=names).delete()
    out: dict = {"hosts": len(answers), "leases": sum(len(r) for _, r in answers)}
    for label, shift in (("first", 0), ("same", 0), ("renewed", 1800)):
        parse_s = store_s = worst = 0.0
        written = 0
        for host, rows in answers:
            raw = json.loads(json.dumps([[a, m, c + shift, v, n, s] for a, m, c, v, n, s in rows]))
            start = time.perf_counter()
            parsed, _skipped = lease_rows_parse(raw)
            mid = time.perf_counter()
            written += leases_store(host=host, rows=parsed)
            done = time.perf_counter()
            parse_s += mid - start
            store_s += done - mid
            worst = max(worst, done - start)
        out[label] = {"parse": parse_s, "store": store_s, "worst_host": worst, "written": written}
    out["rows"] = Lease.objects.filter(host_name__in=names).count()
    # Rounds from the cursor (issue 26): the host's answer holds only what Kea wrote since the
    # last stored round; nothing, or 100 leases renewed on each host, stored as one round each
    # (lease_round_store: parse, merge, the cursor moved).
    out["full_bytes"] = sum(
        len(json.dumps({"full": True, "leases": rows, "gone": [], "cursor": [1, 1, 1]},
                       separators=(",", ":")))
        for _, rows in answers
    )  # fmt: skip
    for label, count in (("cursor_none", 0), ("cursor_100", 100)):
        seconds = worst = 0.0
        size = written = 0
        for host, rows in answers:
            changed = [[a, m, c + 3600, v, n, s] for a, m, c, v, n, s in rows[:count]]
            line = json.dumps({"full": False, "leases": changed, "gone": [],
                               "cursor": [1, 1 + count, 1]}, separators=(",", ":"))  # fmt: skip
            size += len(line)
            start = time.perf_counter()
            written += lease_round_store(host=host, data=json.loads(line)).written
            took = time.perf_counter() - start
            seconds += took
            worst = max(worst, took)
        out[label] = {"seconds": seconds, "worst_host": worst, "bytes": size, "written": written}
    out["interval"] = settings.PORTAL_DHCP_LEASE_INTERVAL
    LeaseCursor.objects.filter(host__name__in=names).delete()
    Lease.objects.filter(host_name__in=names).delete()
    return out


def health(sites) -> dict:
    from apps.firewall.models import FirewallHost
    from apps.health.models import HostHealthSample
    from apps.health.services import _store

    hosts = list(FirewallHost.objects.filter(site__in=sites))
    start = time.perf_counter()
    for host in hosts:
        _store(
            host,
            HostHealthSample(
                host=host, reachable=True, latency_ms=1.0, conntrack_count=120_000,
                conntrack_max=1_000_000, load1=0.5, digest="0" * 64,
                interfaces={"dorm0": {"rx_bytes": 1}, "inet0": {"rx_bytes": 1}},
            ),
        )  # fmt: skip
    seconds = time.perf_counter() - start
    HostHealthSample.objects.filter(host__in=hosts).delete()
    return {"rows": len(hosts), "seconds": seconds}


def steady_compile(host) -> dict:
    """One member's change on `host` (a saved FirewallHost): the full path (the worker's steady
    state before the delta path: the cache warm, database -> snapshot -> text), the delta path
    as firewall_bench --delta measures it (the member read by id + `delta_step`), and the
    worker's own `delta_compile` as a change's run calls it (apps/firewall/compiled.py: the read
    of the members changed since the last read, the host's snapshot, the changed members found,
    the step, the version row), each over a forward switched off and on."""
    from django.db import connection, transaction
    from django.db.models import F

    from apps.firewall.choices import PushStatus
    from apps.firewall.compiled import delta_compile
    from apps.firewall.memo import PUSH_MEMO, DeltaState
    from apps.firewall.models import RuleSetVersion
    from apps.firewall.snapshot import (
        firewall_snapshot_build,
        snapshot_cache_clear,
        snapshot_data_read,
    )
    from apps.network.models import PortForward
    from tests.bench.firewall_bench import delta_bench
    from workers.ruleset import build, compile_snapshot
    from workers.ruleset.delta import DeltaBase

    buildings = list(host.site.buildings.values_list("pk", flat=True)) if host.site_id else []
    forwards = PortForward.objects.filter(
        enabled=True, member__status="active", public_first=F("public_last")
    )
    if buildings:
        forwards = forwards.filter(member__room__building__in=buildings)
    forward_id = forwards.order_by("id").values_list("id", flat=True)[0]

    def one_change() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE network_portforward SET enabled = NOT enabled WHERE id = %s", [forward_id]
            )

    snapshot_cache_clear()
    snapshot_data_read()
    one_change()
    firewall_snapshot_build(host=host, data=snapshot_data_read())  # warm
    reads, totals, members = [], [], 0
    for _ in range(4):  # even: the forward ends as it began
        one_change()
        start = time.perf_counter()
        snap = firewall_snapshot_build(host=host, data=snapshot_data_read())
        reads.append(time.perf_counter() - start)
        compile_snapshot(snap)
        totals.append(time.perf_counter() - start)
        members = len(snap.members)
    one_change()
    out = {"members": members, "read": min(reads), "total": min(totals)}
    out.update(delta_bench(host, forward_id, one_change, buildings=set(buildings)))

    # The worker's delta_compile: the host runs the version the base describes (as after a
    # confirmed full push); each step's version is "confirmed" at once, as the push would.
    snap = firewall_snapshot_build(host=host, data=snapshot_data_read())
    base = DeltaBase.from_ruleset(snap, build(snap))
    host.push_status, host.applied_checksum = PushStatus.APPLIED, "bench-base"
    PUSH_MEMO.delta[host.pk] = DeltaState("bench-base", base, snap, {})
    worker, reads, stepped = [], [], 0
    try:
        for _ in range(10):
            one_change()
            start = time.perf_counter()
            data = snapshot_data_read(since_last=True)  # as a change's run reads
            read = time.perf_counter() - start
            version = delta_compile(host=host, data=data, cause="bench")
            worker.append(time.perf_counter() - start)
            reads.append(read)
            if version is not None and hasattr(version, "delta_increment"):
                stepped += 1
                host.applied_checksum = version.content_hash
    finally:
        PUSH_MEMO.delta.pop(host.pk, None)
        RuleSetVersion.objects.filter(host=host, cause="bench").delete()
    out.update(
        worker_median=statistics.median(worker),
        worker_best=min(worker),
        worker_read_median=statistics.median(reads),
        worker_steps=stepped,
    )
    return out


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from apps.firewall.models import FirewallHost, Site
    from apps.members.models import Member

    sites = list(Site.objects.filter(name__startswith="demo-").order_by("name"))
    site_host = FirewallHost.objects.filter(site=sites[0]).order_by("name").first()
    # A host serving every building (a site without buildings), shaped as a big site is (mq).
    everything, _ = Site.objects.get_or_create(name="bench-all")
    everything.buildings.clear()
    FirewallHost.objects.filter(name="bench-all").delete()
    wide = FirewallHost.objects.create(
        name="bench-all", address="127.0.0.1", site=everything, shaping_root="mq", tx_queues=8,
        enabled=False,
    )  # fmt: skip
    result = {
        "members": Member.objects.count(),
        "sites": len(sites),
        "traffic": traffic(sites),
        "health": health(sites),
        "leases": leases(sites),
        "compile_site": steady_compile(site_host),
        "compile_all": steady_compile(wide),
    }
    wide.delete()
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
