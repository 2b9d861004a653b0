"""From an API call to a working forward at 100,000 members across 5 sites, a change in one site,
the other four sites' hosts loaded beside it (issue 26, "Scale across sites").

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
copy of the 100,000-member seed_demo database split into five sites (seed_demo --sites 5) and
its own Redis database; prints one JSON object (pipeline_bench's, plus the loaded hosts).

Site demo-1 is the lab's pair: pl-nat1 and pl-nat2 take its buildings (the site's settings are
the lab's: its virtual addresses, networks, VRRP), its seeded hosts demo-1-fw1/-fw2 stay
disabled, and the real firewall worker pushes to the pair over SSH as in pipeline_bench. The
other four sites' pairs (demo-2-fw1 .. demo-5-fw2, 20,000 members per site) are namespaces
pl-cbs<N>fw<H> holding their host's full rule set (its nft text and tc batch, compiled from the
database, loaded once: `nft -f` and `tc -batch`, on veth links named as the host's), kept
loaded through the measurement. They are not pushed to: a change in demo-1 starts a run of
demo-1 only, and the portal's hosts of those sites stay disabled (no SSH daemon, no agent).
What they show is what the lab holds: each load's time (the nft part and the tc part) and the
kernel memory it took (slab, vmalloc and per-cpu, /proc/meminfo), and the machine's available
memory after all of them. All namespaces share one kernel: the tc part of a load grows with the
HTB classes other namespaces hold already (real sites are separate machines).

Alone, `--grow N` loads one site host's rule set (demo-2-fw1) into N fresh namespaces one after
another and prints, per load, the nft and tc wall times, tc's user and system CPU and the
kernel's per-cpu memory (no lab, no worker; about a minute for 6):

    DATABASE_URL=postgresql://portal@/portal_bench_100000?host=$PWD/var/run \
        flock /tmp/pl-lab.lock .venv/bin/python -m tests.bench.sites_pipeline_bench --grow 6
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import django

from tests.bench.pipeline_bench import LAB, run
from tests.bench.ruleset_bench import _host_links, _kernel_memory, _write, namespaces


def _available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _site_namespaces(sites) -> list[tuple[str, object]]:
    from apps.firewall.models import FirewallHost

    out = []
    for n, site in enumerate(sites, start=1):
        if n == 1:
            continue  # the lab pair's
        for h, host in enumerate(FirewallHost.objects.filter(site=site).order_by("name")[:2], 1):
            out.append((f"pl-cbs{n}fw{h}", host))
    return out


def load_hosts(pairs, tmp: str) -> dict:
    """Each host's full rule set into its namespace: compile time, load time, kernel memory."""
    from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
    from workers.ruleset import compile_snapshot

    data = snapshot_data_read()
    loads = []
    for ns, host in pairs:
        start = time.perf_counter()
        snap = firewall_snapshot_build(host=host, data=data)
        compiled = compile_snapshot(snap)
        compile_s = time.perf_counter() - start
        nft_path = _write(tmp, f"{ns}.nft", compiled.nft)
        tc_path = _write(tmp, f"{ns}.tc", compiled.tc)
        _host_links(ns, snap.host, queues=snap.host.tx_queues)
        before = _kernel_memory()
        start = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", nft_path], check=True)
        nft_s = time.perf_counter() - start
        if compiled.tc.strip():
            subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", tc_path], check=True)
        load_s = time.perf_counter() - start
        loads.append(
            {
                "ns": ns,
                "host": host.name,
                "members": len(snap.members),
                "nft_mb": len(compiled.nft) / 1e6,
                "compile": compile_s,
                "load": load_s,
                "nft": nft_s,
                "tc_lines": compiled.tc.count("\n"),
                "kernel_mb": (_kernel_memory() - before) / 1e6,
            }
        )
    return {"loaded": loads, "available_mb": _available() / 1e6}


def _meminfo(name: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(f"{name}:"):
                return int(line.split()[1]) * 1024
    return 0


def grow(count: int) -> list[dict]:
    """The same host's rule set into `count` namespaces one after another (see the module)."""
    from apps.firewall.models import FirewallHost
    from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
    from workers.ruleset import compile_snapshot

    snap = firewall_snapshot_build(
        host=FirewallHost.objects.get(name="demo-2-fw1"), data=snapshot_data_read()
    )
    compiled = compile_snapshot(snap)
    names = [f"pl-cbg{n}" for n in range(count)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, namespaces(*names):
        nft_path = _write(tmp, "host.nft", compiled.nft)
        tc_path = _write(tmp, "host.tc", compiled.tc)
        for ns in names:
            _host_links(ns, snap.host, queues=snap.host.tx_queues)
            start = time.perf_counter()
            subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", nft_path], check=True)
            nft_s = time.perf_counter() - start
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", tc_path], check=True)
            tc_s = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = {
                "ns": ns, "nft": round(nft_s, 2), "tc": round(tc_s, 2),
                "tc_user": round(after.ru_utime - before.ru_utime, 2),
                "tc_sys": round(after.ru_stime - before.ru_stime, 2),
                "percpu_mb": round(_meminfo("Percpu") / 1e6, 1),
                "load1": round(os.getloadavg()[0], 2),
            }  # fmt: skip
            print(json.dumps(row), flush=True)  # noqa: T201
            rows.append(row)
    return rows


def lab_pair_memory() -> dict:
    """What the lab pair's processes hold (sshd, the host agent, Kea, keepalived, conntrackd,
    portal-ra: every process in pl-nat1 and pl-nat2), resident set in MB per host."""
    out = {}
    for ns in ("pl-nat1", "pl-nat2"):
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False
        ).stdout.split()
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except OSError:
                continue
        out[ns] = {"processes": len(pids), "rss_mb": total / 1e6}
    return {"pair_memory": out, "available_end_mb": _available() / 1e6}


def lab_pair_to(site) -> list[int]:
    """The lab's pair serves `site`: the site takes the lab site's settings, the pair moves
    into it; returns the site's buildings."""
    from apps.firewall.models import FirewallHost, Site

    lab_site = Site.objects.get(pk=Site.default_pk())
    keep = {"id", "name", "status", "status_reason", "status_at"}
    for field in Site._meta.concrete_fields:
        if field.name not in keep:
            setattr(site, field.attname, getattr(lab_site, field.attname))
    site.save()
    FirewallHost.objects.filter(name__in=("pl-nat1", "pl-nat2")).update(site=site)
    FirewallHost.objects.filter(name__startswith="demo-").update(enabled=False)
    return list(site.buildings.values_list("pk", flat=True))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("PORTAL_BENCH_NO_BURST", "1")
    django.setup()
    if "--grow" in sys.argv:
        grow(int(sys.argv[sys.argv.index("--grow") + 1]))
        return
    from django.conf import settings
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from apps.firewall.live import live_states
    from apps.firewall.models import FirewallHost, RuleSetVersion, Site
    from apps.network.models import NetworkSettings, PortForward
    from apps.network.ports import PortRange
    from apps.network.services import port_forward_create
    from tests.factories import device_add, member_active

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    sites = list(Site.objects.filter(name__startswith="demo-").order_by("name"))
    if len(sites) != 5:
        raise SystemExit(f"expected the five sites of seed_demo --sites 5, found {len(sites)}")
    pairs = _site_namespaces(sites)
    available_before = _available()
    with tempfile.TemporaryDirectory() as tmp, namespaces(*(ns for ns, _ in pairs)):
        loaded = load_hosts(pairs, tmp)
        loaded["available_before_mb"] = available_before / 1e6
        subprocess.run([*LAB, "up"], check=True, capture_output=True)
        try:

            def prepare():
                from apps.members.choices import NETWORKED_STATUSES
                from apps.members.models import Member

                buildings = lab_pair_to(sites[0])
                loaded["site_members"] = Member.objects.filter(
                    room__building__in=buildings, status__in=NETWORKED_STATUSES
                ).count()
                return buildings, {"sites": loaded}

            run(
                call_command, APIClient, FirewallHost, RuleSetVersion, live_states,
                NetworkSettings, PortForward, PortRange, port_forward_create, device_add,
                member_active, prepare=prepare, finish=lab_pair_memory,
            )  # fmt: skip
        finally:
            subprocess.run([*LAB, "down"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
