"""Sites: 100,000 members across 5 sites of 20,000 (seed_demo --sites 5), portal-wide figures
(one traffic reading of every host, the health samples of a round) and one site's steady
compile of a member's change.

Run by tests/bench/run.py in a subprocess with DATABASE_URL set to the seed_demo database of
100,000 members with its five sites demo-1 .. demo-5 (two hosts each); prints one JSON object.

Method. Traffic: each site's devices (its buildings' members) give the keys a pair reads: fw1
(the IPv4 primary) counts every device IPv4 in and out, fw2 (the IPv6 primary) every member /64
in and out; every key has traffic. Each host's answer is the JSON the helper's verb sends; the
portal's time for a host is the answer's parse (json + traffic_reply_parse) plus traffic_store.
A first reading (every key new), then a next one (every key changed): the sum over the ten
hosts is the portal time of one interval. Health: one sample per host stored through the health
service's store (ten rows per round, whatever the member count). Compile: the worker's steady
state as in "Firewall compile from the database" (the cache warm, one forward switched, then
database -> snapshot and database -> text for one host), for a host of demo-1 (20,000 members
in its site, 100,000 portal-wide) and for a host serving every building (100,000 in its site).
"""

from __future__ import annotations

import ipaddress
import json
import os
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
    from django.db import connection, transaction
    from django.db.models import F

    from apps.firewall.snapshot import (
        firewall_snapshot_build,
        snapshot_cache_clear,
        snapshot_data_read,
    )
    from apps.network.models import PortForward
    from workers.ruleset import compile_snapshot

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
    return {"members": members, "read": min(reads), "total": min(totals)}


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
    wide = FirewallHost(
        name="bench-all", address="127.0.0.1", site=everything, shaping_root="mq", tx_queues=8
    )
    result = {
        "members": Member.objects.count(),
        "sites": len(sites),
        "traffic": traffic(sites),
        "health": health(sites),
        "compile_site": steady_compile(site_host),
        "compile_all": steady_compile(wide),
    }
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
