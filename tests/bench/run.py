"""`make bench`: run every benchmark and write docs/BENCHMARKS.md.

Each benchmark is a function registered in BENCHMARKS that returns rows of
(name, value, unit, target). Later issues add their own.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
Row = tuple[str, str, str, str]
BENCHMARKS: list[tuple[str, Callable[[], Iterable[Row]]]] = []


def benchmark(title: str) -> Callable[[Callable[[], Iterable[Row]]], Callable[[], Iterable[Row]]]:
    """Register a benchmark section."""

    def register(func: Callable[[], Iterable[Row]]) -> Callable[[], Iterable[Row]]:
        BENCHMARKS.append((title, func))
        return func

    return register


# Scratch databases are named <prefix>, <prefix>_<members>, ...; PORTAL_BENCH_DB sets the prefix
# so that several people can bench against one PostgreSQL without dropping each other's data.
DB_PREFIX = os.environ.get("PORTAL_BENCH_DB", "portal_bench")


def _db_url(dbname: str) -> str:
    return f"postgresql://portal@/{dbname}?host={ROOT / 'var/run'}"


def _seed_env(url: str) -> dict[str, str]:
    return dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url)


def _seed(url: str, members: int) -> tuple[float, str]:
    """seed_demo --members N into the database at `url`: seconds and its summary line."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--members", str(members)],
        cwd=ROOT,
        env=_seed_env(url),
        check=True,
        capture_output=True,
        text=True,
    )
    return time.monotonic() - start, done.stdout.strip().splitlines()[-1]


def _fresh_database(dbname: str) -> str:
    host = str(ROOT / "var/run")
    subprocess.run(
        ["dropdb", "-h", host, "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(["createdb", "-h", host, "-U", "portal", dbname], check=True)
    url = _db_url(dbname)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=_seed_env(url), check=True
    )
    return url


def _seeded_name(members: int) -> str:
    return DB_PREFIX if members == 20000 else f"{DB_PREFIX}_{members}"


@benchmark("Demo data")
def seed_demo_sizes() -> Iterable[Row]:
    """seed_demo with 20,000 and 100,000 members into fresh scratch databases, then again."""
    for members, target in ((20000, "< 60 s"), (100000, "< 120 s")):
        url = _fresh_database(_seeded_name(members))
        first, _line = _seed(url, members)
        again, _line = _seed(url, members)
        yield (f"seed_demo --members {members} (empty database)", f"{first:.1f}", "s", target)
        yield (f"seed_demo --members {members} again (nothing to add)", f"{again:.1f}", "s", "")


def _seeded_database_url(members: int) -> str:
    """A scratch database with `members` seed_demo members, kept between runs.

    An existing one is reused: seed_demo runs again and adds only what is missing (nothing when
    the arguments match), which takes seconds instead of a full seed.
    """
    dbname = _seeded_name(members)
    url = _db_url(dbname)
    created = subprocess.run(
        ["createdb", "-h", str(ROOT / "var/run"), "-U", "portal", dbname],
        check=False,
        capture_output=True,
    )
    # Always: a database kept from an earlier run gets the migrations added since (indexes).
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env=_seed_env(url),
        check=True,
    )
    seconds, line = _seed(url, members)
    reused = created.returncode != 0 and " 0 member(s) created, 0 membership(s)" in line
    how = "reused (seed_demo added nothing)" if reused else "seeded"
    print(f"  {dbname}: {how} in {seconds:.1f} s", flush=True)  # noqa: T201
    return url


def _bench_database_url(members: int = 20000) -> str:
    """The scratch database of the "Demo data" section (seeded again if it is missing)."""
    return _seeded_database_url(members)


@benchmark("Office hours and resident dashboard (20,000 and 100,000 members, 3 devices each)")
def members_search_and_dashboard() -> Iterable[Row]:
    """member_search p95 per kind of query at both sizes; the dashboard's query count at 1 and
    10 devices."""
    import json

    for members in (20000, 100000):
        command = [sys.executable, "-m", "tests.bench.members_bench"]
        env = _seed_env(_seeded_database_url(members))
        done = subprocess.run(
            command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        tag = f"{members:,} members"
        for kind, figures in result["search"].items():
            found = figures["n"] - figures["empty"]
            yield (
                f"{tag}: search p95: {kind} (p50 {figures['p50']:.1f} ms, {figures['n']} queries, "
                f"{found} found someone)",
                f"{figures['p95']:.1f}",
                "ms",
                "< 20 ms" if members == 100000 else "",
            )
        for devices, queries in sorted(
            result["dashboard_queries"].items(), key=lambda i: int(i[0])
        ):
            yield (
                f"{tag}: resident dashboard with {devices} device(s)",
                str(queries),
                "queries",
                "constant",
            )


@benchmark("CSV downloads of the staff tables (20,000 members, ~60,000 devices)")
def csv_exports() -> Iterable[Row]:
    """tests/bench/export_bench.py against the "Demo data" database: streamed downloads."""
    import json

    url = _bench_database_url()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.export_bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    for row in json.loads(out.stdout.strip().splitlines()[-1]):
        yield tuple(row)


@benchmark("Firewall compile from the database (seed_demo data)")
def firewall_compile_from_database() -> Iterable[Row]:
    """Database -> snapshot -> nft text at 1,000 to 100,000 members, vs a COPY floor; the full
    rule set and one change applied in a namespace; the worker's memory."""
    import json

    for members in (1000, 5000, 20000, 100000):
        env = _seed_env(_seeded_database_url(members))
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench.firewall_bench"],
            cwd=ROOT,
            env=env,
            check=False,
            capture_output=True,
            text=True,
        )
        if out.returncode:
            tail = " | ".join(out.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"firewall_bench at {members} members failed: {tail}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        k20, k100 = members == 20000, members == 100000
        what = (
            f"{members:,} members ({r['members']:,} networked, {r['devices']:,} devices, "
            f"{r['forwards']:,} forwards, {r['openings']:,} openings, {r['shaped']:,} shaped; "
            f"{r['elements']:,} set elements)"
        )
        floor = r["copy_floor"]
        yield (
            f"{what}: database -> snapshot, cold (every member built)",
            f"{r['db_to_snapshot']:.3f}",
            "s",
            "< 1 s" if k20 else "",
        )
        yield (
            f"{what}: database -> snapshot, worker steady state (one member changed)",
            f"{r['warm_db_to_snapshot']:.3f}",
            "s",
            "< 1 s" if k20 else "",
        )
        yield (
            f"{what}: snapshot -> text",
            f"{r['snapshot_to_text']:.3f}",
            "s",
            "< 0.25 s" if k20 else "",
        )
        ratio = r["db_to_text"] / floor if floor else 0
        yield (
            f"{what}: database -> text, one cold pass (COPY floor {floor:.3f} s)",
            f"{r['db_to_text']:.3f} ({ratio:.1f}x floor)",
            "s",
            "<= 3x floor",
        )
        warm = r["warm_db_to_text"] / floor if floor else 0
        yield (
            f"{what}: database -> text, worker steady state (one member changed)",
            f"{r['warm_db_to_text']:.3f} ({warm:.1f}x floor)",
            "s",
            "<= 2x floor" if k20 else ("< 1.5 s" if k100 else "<= 3x floor"),
        )
        yield (
            f"{what}: peak memory of that pass",
            f"{r['peak_mb']:.0f}",
            "MB",
            "< 300 MB" if k20 else "",
        )
        yield (
            f"{what}: worker RSS after the warm read (process before any read: "
            f"{r['rss_base_mb']:.0f} MB; peak of the whole bench process {r['rss_peak_mb']:.0f} MB)",
            f"{r['rss_warm_mb']:.0f}",
            "MB",
            "",
        )
        yield (
            f"{what}: worker RSS growth per networked member (cache and snapshot)",
            f"{r['rss_per_member_kb']:.1f}",
            "KB",
            "",
        )
        yield (f"{what}: nft text", f"{r['text_mb']:.2f}", "MB", "< 12 MB" if k20 else "")
        yield (
            f"{what}: nft -f into a fresh namespace",
            f"{r['nft_load']:.2f}",
            "s",
            "< 2.5 s" if k20 else ("< 8 s" if k100 else ""),
        )
        yield (
            f"{what}: tc -batch of the full tree, built anew (the first load after a boot; "
            f"{r['classes']:,} HTB classes, {r['shaping']} root; {r['tc_mb']:.2f} MB)",
            f"{r['tc_load']:.2f}",
            "s",
            "",
        )
        yield (
            f"{what}: the next full tree (one class changed) as the host agent loads it onto "
            f"the loaded host (tree kept on {r['tc_keep_kept']} of the links; plan "
            f"{r['tc_keep_plan']:.2f} s)",
            f"{r['tc_keep']:.2f}",
            "s",
            "< 8 s" if k100 else "",
        )
        yield (
            f"{what}: one forward added on the loaded host: nft -f of the increment "
            f"({r['add_elements']} element, {r['add_bytes']} B) [median {r['add_median'] * 1000:.1f}]",
            f"{r['add_best'] * 1000:.1f}",
            "ms",
            "< 25 ms",
        )
        yield (
            f"{what}: steady compile of one member's change (delta path: the member read by id "
            f"+ its increment, {r['delta_elements']} elements; best {r['delta_best'] * 1000:.1f}, "
            f"of which the read {r['delta_read_median'] * 1000:.1f}) [median]",
            f"{r['delta_median'] * 1000:.1f}",
            "ms",
            "< 20 ms" if k20 else ("< 50 ms" if k100 else ""),
        )
        yield (
            f"{what}: delta base from a full compile (every member's elements, the content "
            f"digest {r['delta_digest']:.2f} s of it; once per full compile)",
            f"{r['delta_base']:.2f}",
            "s",
            "",
        )
        yield (
            f"{what}: after the increments, the delta base's digest equals a fresh full compile's",
            "yes" if r["delta_equal"] else "NO",
            "",
            "yes",
        )
        yield (
            f"{what}: one shaping class changed on the loaded host: tc -batch of the increment "
            f"({r['class_lines']} class lines) [median {r['class_median'] * 1000:.1f}]",
            f"{r['class_best'] * 1000:.1f}",
            "ms",
            "< 25 ms",
        )


@benchmark("Firewall full load: nft -f at 100,000 members, layouts side by side (seed_demo data)")
def firewall_full_load() -> Iterable[Row]:
    """tests/bench/nft_load_bench.py on the 100,000-member database: the previous and the
    current layout loaded alternately into fresh namespaces, the counters' share, nft -c."""
    import json

    env = _seed_env(_seeded_database_url(100000))
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.nft_load_bench"],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"nft_load_bench failed: {tail}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    loads = ", ".join(f"{x:.1f}" for x in (*r["load_before"][:1], *r["load_after"][:1]))
    what = (
        f"100,000 members ({r['members']:,} networked; load average {loads} before/after, "
        f"{r['started']})"
    )
    labels = {
        "previous": "previous layout (anti-spoofing's own copies dev4_pub, src6_net, src6)",
        "current": "current layout (anti-spoofing looks up the outbound accounting sets)",
        "no_counters": "current layout without the accounting sets' counters (cost of the counters)",
    }
    kinds = {
        "load": "nft -f into a fresh namespace",
        "replace": "the full push's transaction on the loaded host (delete table, load again)",
        "agent": "the full push's transaction on the loaded host as the host agent loads it "
        "(portal_fw/loader.py: libnftables in a child, answered when the kernel committed)",
        "delete": "the loaded tables deleted alone (delete table; the wall time beyond the CPU "
        "time is nft waiting at its exit for the kernel to free them)",
    }
    for kind, how in kinds.items():
        for name, label in labels.items():
            x = r.get(f"{name}_{kind}")
            if x is None:
                continue
            median = f" [median {x['median']:.2f} of {x['n']}]" if x["n"] > 1 else ""
            # A small nft's peak RSS is the bench process's, inherited at fork: not shown.
            rss = f", nft RSS {x['rss_mb']:.0f} MB" if kind != "delete" else ""
            if kind == "agent":  # its exit waits for the kernel to free the old tables
                rss += f"; the child exited at {x['exit']:.2f} s"
            yield (
                f"{what}: {label}: {r[f'{name}_elements']:,} elements, {r[f'{name}_mb']:.2f} MB; "
                f"{how} (user {x['user']:.2f} s, system {x['sys']:.2f} s{rss}){median}",
                f"{x['wall']:.2f}",
                "s",
                "< 8 s" if name == "current" and kind != "delete" else "",
            )
    sc = r["scope"]
    yield (
        f"{what}: the host agent's scope check of the current text (portal_fw.scope; the "
        f"character loop it replaced: {sc['previous']:.2f} s)",
        f"{sc['current']:.2f}",
        "s",
        "",
    )
    c = r["check"]
    yield (
        f"{what}: current layout: nft -c of the same text (the host agent's check before a full "
        f"load; user {c['user']:.2f} s, system {c['sys']:.2f} s)",
        f"{c['wall']:.2f}",
        "s",
        "",
    )


@benchmark("Rule-set compiler (synthetic snapshots; nft, tc and packets in namespaces)")
def compiler_synthetic() -> Iterable[Row]:
    """tests.bench.ruleset_bench: compile, load, kernel memory, increments, classes, new flows."""
    from tests.bench.ruleset_bench import flow_rows, run_benchmarks

    if os.environ.get("PORTAL_BENCH_RULESET_ONLY") == "flows":
        yield from _flows_only(flow_rows)
        return
    for section, name, value, unit, target in run_benchmarks(
        progress=lambda msg: print(f"  compiler: {msg}", flush=True)  # noqa: T201
    ):
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        yield (f"{section}: {name}", shown, unit, target)


FLOW_ROWS = "new flows per second"


def _flows_only(flow_rows: Callable[[int, int], list]) -> Iterable[Row]:
    """PORTAL_BENCH_RULESET_ONLY=flows: only the new-flows rows run (20,000 members, 3
    repetitions, a few minutes); the section's other rows stay as the file has them."""
    title = "Rule-set compiler (synthetic snapshots; nft, tc and packets in namespaces)"
    target = ROOT / "docs/BENCHMARKS.md"
    old = _sections(target.read_text()).get(title, []) if target.exists() else []
    kept = []
    for line in old:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] != "measurement":
            kept.append((cells[0], cells[1], cells[2], cells[3]))
    load = os.getloadavg()[0]
    fresh: list[Row] = [
        (f"{FLOW_ROWS}: load average (1 min) at the start of these rows", f"{load:.3f}", "", "")
    ]
    for section, name, value, unit, target_ in flow_rows(20000, 3):
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        fresh.append((f"{section}: {name}", shown, unit, target_))
    fresh.append(
        (
            f"{FLOW_ROWS}: load average (1 min) at the end of these rows",
            f"{os.getloadavg()[0]:.3f}",
            "",
            "",
        )
    )
    placed = False
    for row in kept:
        if row[0].startswith(FLOW_ROWS):
            if not placed:
                yield from fresh
                placed = True
            continue
        yield row
    if not placed:
        yield from fresh


@benchmark("Kernel lab: Debian's kernel in qemu (fast path on / off / no firewall; ratios only)")
def kernel_lab() -> Iterable[Row]:
    """tests.bench.kernel_lab_bench: one boot, the kernel-lab suite's cases and the
    established-flow rows side by side (software emulation: absolute figures mean little)."""
    from tests.bench.kernel_lab_bench import run_benchmarks

    for name, value, unit, target in run_benchmarks(
        progress=lambda msg: print(f"  kernel lab: {msg}", flush=True)  # noqa: T201
    ):
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        yield (name, shown, unit, target)


@benchmark(
    "From the API to a working forward (20,000 members; real firewall worker, lab firewalls)"
)
def pipeline_latency() -> Iterable[Row]:
    """20 forwards one after another (API call -> first answer from pl-inet), the first right
    after the firewall worker started; a burst of 200. On a copy of the 20k seeded database."""
    import json

    template = _seeded_name(20000)
    _seeded_database_url(20000)
    dbname = f"{DB_PREFIX}_pipeline"
    run_dir = ROOT / "var/run"
    subprocess.run(
        ["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(
        ["createdb", "-h", str(run_dir), "-U", "portal", "-T", template, dbname], check=True
    )
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgresql://portal@/{dbname}?host={run_dir}",
        # Its own Redis database: a running `make run` keeps its queue and locks.
        REDIS_URL=f"unix://{run_dir}/redis.sock?db=2",
        CELERY_BROKER_URL=f"redis+socket://{run_dir}/redis.sock?virtual_host=2",
    )
    env.pop("PORTAL_FIREWALL_DEBOUNCE", None)  # measured with the default debounce
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.pipeline_bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    yield ("networked members in the database", str(r["members"]), "", "")
    yield ("first full push of both hosts (firewall_push --now)", f"{r['full_push']:.1f}", "s", "")
    yield ("debounce (PORTAL_FIREWALL_DEBOUNCE, the default)", f"{r['debounce']:.1f}", "s", "")
    yield (
        "firewall worker start -> takes tasks (its warm-up: read, compile, connect)",
        f"{r['worker_ready_seconds']:.2f}",
        "s",
        "",
    )
    yield (
        "20 forwards one after another: API call -> answers from pl-inet, p50",
        f"{r['p50']:.2f}",
        "s",
        "",
    )
    yield ("  of which the API call itself (POST -> 201), p50", f"{r['api_p50']:.2f}", "s", "")
    yield (
        f"  same, p95 (max {r['max']:.2f} s; the first, right after the worker started: "
        f"{r['first']:.2f} s)",
        f"{r['p95']:.2f}",
        "s",
        "< 0.5 s",
    )
    yield from _run_rows(r.get("profile") or {})
    yield from _restart_rows(r)
    yield (
        f"burst of 200 forwards (created in {r['burst_seconds_to_create']:.2f} s): all live",
        f"{r['burst_all_live']:.2f}",
        "s",
        "< 3 s",  # issue 26
    )
    yield ("  rollouts that burst took", str(r["burst_rollouts"]), "runs", "a handful")
    for n, phases in enumerate(r.get("burst_runs", [])[:6], 1):  # where the burst's time goes
        total = phases.pop("total", 0)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if k != "reused")
        yield (f"    run {n} of the burst, seconds: {parts}", f"{float(total):.2f}", "s", "")
    yield (
        "  first, middle and last of the burst answer from pl-inet",
        "yes" if r["burst_answering"] else "NO",
        "",
        "yes",
    )


@benchmark(
    "From the API to a working forward (100,000 members across 5 sites, a change in one site; "
    "real firewall worker, lab firewalls, the other sites' hosts loaded)"
)
def sites_pipeline_latency() -> Iterable[Row]:
    """tests/bench/sites_pipeline_bench.py on a copy of the 100,000-member database split into
    five sites: the lab pair is demo-1's, the other four pairs hold their full rule sets in
    namespaces of their own; 20 forwards one after another in demo-1, the first right after the
    firewall worker started, then the first change after a restart."""
    import json

    template = _seeded_name(100000)
    url = _seeded_database_url(100000)
    subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--members", "100000", "--sites", "5"],
        cwd=ROOT, env=_seed_env(url), check=True, capture_output=True, text=True,
    )  # fmt: skip
    dbname = f"{DB_PREFIX}_sites_pipeline"
    run_dir = ROOT / "var/run"
    subprocess.run(
        ["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(
        ["createdb", "-h", str(run_dir), "-U", "portal", "-T", template, dbname], check=True
    )
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgresql://portal@/{dbname}?host={run_dir}",
        REDIS_URL=f"unix://{run_dir}/redis.sock?db=2",
        CELERY_BROKER_URL=f"redis+socket://{run_dir}/redis.sock?virtual_host=2",
        PORTAL_BENCH_NO_BURST="1",
    )
    env.pop("PORTAL_FIREWALL_DEBOUNCE", None)  # measured with the default debounce
    try:
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench.sites_pipeline_bench"],
            cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
    finally:
        subprocess.run(
            ["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
            check=False,
            capture_output=True,
        )
    if out.returncode:
        tail = " | ".join(out.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"sites_pipeline_bench failed: {tail}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    s = r["sites"]
    loads = s["loaded"]
    yield ("networked members in the database (portal-wide)", f"{r['members']:,}", "", "")
    yield ("  networked members of the changed site (demo-1: pl-nat1, pl-nat2)",
           f"{s['site_members']:,}", "", "")  # fmt: skip
    for x in loads:
        yield (
            f"other site's host {x['host']} in {x['ns']} ({x['members']:,} networked members, "
            f"{x['nft_mb']:.1f} MB of nft text, {x.get('tc_lines', 0):,} tc lines; compiled in "
            f"{x['compile']:.2f} s): full rule set loaded, nft -f {x.get('nft', 0):.2f} s + "
            f"tc -batch {x['load'] - x.get('nft', 0):.2f} s; kernel memory {x['kernel_mb']:.0f} MB",
            f"{x['load']:.2f}",
            "s",
            "",
        )
    kernel = sorted(x["kernel_mb"] for x in loads)
    per_host = kernel[len(kernel) // 2]
    yield (
        f"lab: firewall namespaces holding a full 20,000-member site's rule set at once "
        f"({len(loads)} of the other sites + the lab pair); kernel memory per host, median",
        f"{per_host:.0f}",
        "MB",
        "",
    )
    yield (
        f"  memory available before / after loading them: {s['available_before_mb'] / 1e3:.1f}"
        f" / {s['available_mb'] / 1e3:.1f} GB; hosts of this size that would fit in what is left",
        f"{int(s['available_mb'] // max(per_host, 1)):,}",
        "hosts",
        "",
    )
    for ns, x in sorted((r.get("pair_memory") or {}).items()):
        yield (
            f"  the lab pair's {ns} after the run: its {x['processes']} processes (sshd, host "
            f"agent, Kea, keepalived, conntrackd, ...), resident",
            f"{x['rss_mb']:.0f}",
            "MB",
            "",
        )
    yield ("first full push of the changed site's pair (firewall_push --now)",
           f"{r['full_push']:.1f}", "s", "")  # fmt: skip
    yield ("debounce (PORTAL_FIREWALL_DEBOUNCE, the default)", f"{r['debounce']:.1f}", "s", "")
    yield (
        "firewall worker start -> takes tasks (its warm-up: read, compile, connect)",
        f"{r['worker_ready_seconds']:.2f}",
        "s",
        "",
    )
    yield (
        "20 forwards one after another in demo-1: API call -> answers from pl-inet, p50",
        f"{r['p50']:.2f}",
        "s",
        "",
    )
    yield ("  of which the API call itself (POST -> 201), p50", f"{r['api_p50']:.2f}", "s", "")
    yield (
        f"  same, p95 (max {r['max']:.2f} s; the first, right after the worker started: "
        f"{r['first']:.2f} s)",
        f"{r['p95']:.2f}",
        "s",
        "< 0.5 s",
    )
    profile = r.get("profile") or {}
    for key in ("compile (per host)", "push pl-nat1 apply", "push pl-nat2 apply"):
        if key in profile:
            yield (f"  profile, median per change: {key}", f"{profile[key] * 1000:.0f}", "ms", "")
    yield from _run_rows(profile)
    yield from _restart_rows(r)


DEMO_MEMBERS = 50  # seed_demo's default


def _run_rows(profile: dict[str, float]) -> Iterable[Row]:
    """The firewall worker's site runs of the 20 changes, median per phase (site_sync's
    timings: `read` is the database read, `delta <host>` a host's increment, `rollout` the
    pushes, `total` the whole run)."""
    for key, seconds in profile.items():
        if key.startswith("worker run: "):
            what = key.removeprefix("worker run: ")
            yield (f"  profile, median per site run: {what}", f"{seconds * 1000:.0f}", "ms", "")


def _restart_rows(r: dict) -> Iterable[Row]:
    """The first change after a firewall worker restart (pipeline_bench `_restart`)."""
    yield (
        "first change after a firewall worker restart (reload: SIGHUP to the handover "
        "supervisor, as `systemctl reload portal-firewall`): forward created right at the "
        "reload -> answers from pl-inet",
        f"{r['restart_first']:.2f}",
        "s",
        "< 1 s",
    )
    yield ("  the reload: new worker started -> takes tasks (the old one serves until then)",
           f"{r['restart_ready_seconds']:.2f}", "s", "")  # fmt: skip
    if r.get("restart_warm") is not None:
        yield (
            f"    of which its warm-up (seconds: {r['restart_warm_parts']})",
            f"{float(r['restart_warm']):.2f}",
            "s",
            "",
        )
    if r.get("restart_catch_up"):
        yield (f"    its catch-up after the old one stopped (seconds: {r['restart_catch_up']})",
               "", "", "")  # fmt: skip


@benchmark(
    "From the API to a working forward (demo data: seed_demo's 50 members; real firewall "
    "worker, lab firewalls)"
)
def pipeline_latency_demo() -> Iterable[Row]:
    """20 forwards one after another (API call -> first answer from pl-inet) on a copy of a
    seed_demo database with its default size, the first right after the firewall worker
    started; where the time of a change goes (compile, each push step per host)."""
    import json

    template = _seeded_name(DEMO_MEMBERS)
    _seeded_database_url(DEMO_MEMBERS)
    dbname = f"{DB_PREFIX}_pipeline_demo"
    run_dir = ROOT / "var/run"
    subprocess.run(["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
                   check=False, capture_output=True)  # fmt: skip
    subprocess.run(
        ["createdb", "-h", str(run_dir), "-U", "portal", "-T", template, dbname], check=True
    )
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgresql://portal@/{dbname}?host={run_dir}",
        REDIS_URL=f"unix://{run_dir}/redis.sock?db=2",
        CELERY_BROKER_URL=f"redis+socket://{run_dir}/redis.sock?virtual_host=2",
        PORTAL_BENCH_NO_BURST="1",
        PORTAL_BENCH_DEMO="1",
    )
    env.pop("PORTAL_FIREWALL_DEBOUNCE", None)  # measured with the default debounce
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.pipeline_bench"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    load = ", ".join(f"{x:.2f}" for x in r["loadavg"])
    yield ("load average after the run (1, 5, 15 min)", load, "", "")
    yield ("networked members in the database", str(r["members"]), "", "")
    yield ("debounce (PORTAL_FIREWALL_DEBOUNCE, the default)", f"{r['debounce']:.1f}", "s", "")
    yield ("firewall worker start -> takes tasks", f"{r['worker_ready_seconds']:.2f}", "s", "")
    yield ("20 forwards one after another: API call -> answers from pl-inet, p50",
           f"{r['p50']:.3f}", "s", "")  # fmt: skip
    yield ("  of which the API call itself (POST -> 201), p50", f"{r['api_p50']:.3f}", "s", "")
    yield (
        f"  same, p95 (max {r['max']:.2f} s; the first, right after the worker started: "
        f"{r['first']:.2f} s)",
        f"{r['p95']:.3f}",
        "s",
        "< 0.3 s",
    )
    yield from _restart_rows(r)
    for what, seconds in r["profile"].items():  # always: where a change's time goes
        yield (f"  profile, median per change: {what}", f"{seconds * 1000:.0f}", "ms", "")


@benchmark("Host agent: one agent per connection (synthetic snapshots, own namespace, no SSH)")
def host_agent() -> Iterable[Row]:
    """tests.bench.agent_bench (the agent's run directory on a tmpfs, as installed): cold start,
    a full bundle, 40 steady changes (one forward moved
    and back) at demo size (50 members, seed_demo's default) and 20,000 members; where the time
    of one steady apply goes (cProfile, cumulative)."""
    import json
    import re

    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.agent_bench", "50", "20000"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    load = ", ".join(f"{x:.2f}" for x in r["loadavg"])
    yield ("load average after the run (1, 5, 15 min)", load, "", "")
    yield ("the agent's run directory (--run-dir) on", r.get("run_dir", "?"), "", "a tmpfs")
    for s in r["sizes"]:
        tag = f"{s['members']:,} members"
        yield (
            f"{tag}: cold start: process start -> hello",
            f"{s['cold_hello'] * 1000:.0f}",
            "ms",
            "",
        )
        yield (
            f"{tag}: cold start: process start -> first answer",
            f"{s['cold_first_answer'] * 1000:.0f}", "ms", "< 150 ms",
        )  # fmt: skip
        yield (
            f"{tag}: full bundle (nft + tc replace), agent time",
            f"{s['full_agent']:.2f}",
            "s",
            "",
        )
        yield (
            f"{tag}: steady change ({s['elements_changed']} elements; apply-bundle + confirm), "
            f"agent time p50 (apply p50 {s['apply_p50'] * 1000:.1f} ms, p95 "
            f"{s['apply_p95'] * 1000:.1f}; confirm p50 {s['confirm_p50'] * 1000:.1f})",
            f"{s['steady_p50'] * 1000:.1f}", "ms", "",
        )  # fmt: skip
        yield (
            f"{tag}: steady change, agent time p95 ({s['changes']} changes)",
            f"{s['steady_p95'] * 1000:.1f}", "ms", "< 30 ms",
        )  # fmt: skip
        yield (f"{tag}: steady change applied by", s.get("applied_by", "?"), "", "")
        yield (
            f"{tag}: steady change with the pipes (request written -> answer read), p50 / p95",
            f"{s['round_p50'] * 1000:.1f} / {s['round_p95'] * 1000:.1f}", "ms", "",
        )  # fmt: skip
        for line in s["profile"].splitlines():
            m = re.match(r"\s*(\S+)\s+\S+\s+\S+\s+(\S+)\s+\S+\s+(.+)$", line)
            if m and m.group(1)[0].isdigit() and "portal_fw" in m.group(3):
                where = m.group(3).split("portal_fw/")[-1]
                yield (f"{tag}: profile of one steady apply: {where} (cumulative)",
                       f"{float(m.group(2)) * 1000:.1f}", "ms", "")  # fmt: skip


@benchmark("Live state on the resident page (real Chromium, runserver)")
def live_state_polling() -> Iterable[Row]:
    """tests/bench/live_bench.py in a scratch database: requests per open page while pending
    and while idle, and how soon "live" shows after the hosts confirmed."""
    import json

    dbname = f"{DB_PREFIX}_live"
    host = str(ROOT / "var/run")
    subprocess.run(
        ["dropdb", "-h", host, "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(["createdb", "-h", host, "-U", "portal", dbname], check=True)
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgresql://portal@/{dbname}?host={host}",
        CACHE_KEY_PREFIX="portal-bench-live",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.live_bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    r = json.loads(done.stdout.strip().splitlines()[-1])
    badges = int(r["badges"])
    yield (
        f"requests per second, one open page, {badges} badges pending",
        f"{r['pending_rps']:.1f}",
        "req/s",
        "",
    )
    yield (
        "requests per second, one open page, everything live (idle)",
        f"{r['idle_rps']:.1f}",
        "req/s",
        "0",
    )
    yield ('"live" shown after the hosts confirmed', f"{r['shown_live_after']:.2f}", "s", "< 1 s")


@benchmark("DHCP: Kea artefact, check, reload, memory, request rate (synthetic snapshots)")
def dhcp_kea() -> Iterable[Row]:
    """tests.bench.dhcp_bench: compile share, kea-dhcp4 -t, config-reload, RSS, perfdhcp."""
    from tests.bench.dhcp_bench import run_benchmarks as dhcp_benchmarks

    for section, name, value, unit, target in dhcp_benchmarks([20000, 100000]):
        yield (f"{section}: {name}", f"{value:.3f}", unit, target)


@benchmark("DHCP: a device registered through the API -> its reserved lease (lab, real worker)")
def dhcp_api_to_lease() -> Iterable[Row]:
    """tests.bench.dhcp_lease_bench on a scratch database seeded with the demo's 50 members,
    then on a copy of the 20,000-member seeded database (60,000 reservations in Kea)."""
    import json

    run_dir = ROOT / "var/run"
    for members in (DEMO_MEMBERS, 20000):
        dbname = f"{DB_PREFIX}_dhcp"
        extra: dict[str, str] = {}
        if members == DEMO_MEMBERS:
            url = _fresh_database(dbname)
            _seed(url, members)
        else:
            template = _seeded_name(members)
            _seeded_database_url(members)
            subprocess.run(["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
                           check=False, capture_output=True)  # fmt: skip
            subprocess.run(
                ["createdb", "-h", str(run_dir), "-U", "portal", "-T", template, dbname],
                check=True,
            )
            url = _db_url(dbname)
            extra["PORTAL_BENCH_WIDE"] = "1"
        env = dict(
            _seed_env(url),
            REDIS_URL=f"unix://{run_dir}/redis.sock?db=3",
            CELERY_BROKER_URL=f"redis+socket://{run_dir}/redis.sock?virtual_host=3",
            **extra,
        )
        env.pop("PORTAL_FIREWALL_DEBOUNCE", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                       check=True)  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench.dhcp_lease_bench"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        size = f"{r['members']:,} networked members"
        load = ", ".join(f"{x:.2f}" for x in r["loadavg"])
        yield (f"{size}: load average after the run (1, 5, 15 min)", load, "", "")
        yield (f"{size}: first full push of both hosts", f"{r['full_push']:.1f}", "s", "")
        yield (
            f"{size}: {r['rounds']} devices one after another: leased the reserved address",
            str(r["leased"]),
            "",
            str(r["rounds"]),
        )
        yield (f"{size}: API call -> reserved lease, p50", f"{r['p50']:.2f}", "s", "")
        yield (f"{size}:   of which until both hosts hold the file (the push), p50",
               f"{r['pushed_p50']:.2f}", "s", "")  # fmt: skip
        yield (f"{size}:   of which until both hosts' Kea loaded it (the Kea path), p50",
               f"{r['loaded_p50']:.2f}", "s", "")  # fmt: skip
        yield (f"{size}:   one Kea reload (config-reload + freeing reserved leases), p50",
               f"{r['reload_p50']:.2f}", "s", "")  # fmt: skip
        yield (f"{size}:   same, p95 (max {r['max']:.2f} s)", f"{r['p95']:.2f}", "s", "< 1 s")


@benchmark("Resolver: dnsperf against a site's Unbound, DNS untracked vs. tracked (lab)")
def resolver_dnsperf() -> Iterable[Row]:
    """tests.bench.resolver_bench: cached and uncached names, the rule set with and without
    the resolver in dns4 (conntrack forced on for DNS), one run."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.resolver_bench"],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for names in ("cached", "uncached"):
        for mode, label in (("untracked", "untracked (the portal's rule set)"),
                            ("tracked", "conntrack forced on for DNS")):  # fmt: skip
            case = r[f"{mode}_{names}"]
            yield (f"{names} names, {label}: queries/s", f"{case['qps']:.0f}", "q/s", "")
            yield (
                f"  same, p95 latency (p50 {case['p50_ms']:.2f} ms, lost {case['lost']}, "
                f"conntrack entries after {case['conntrack_entries']:.0f})",
                f"{case['p95_ms']:.2f}",
                "ms",
                "",
            )


@benchmark(
    "Resolver: API registration of a walled device -> not captive and www.example loads (lab)"
)
def resolver_captive() -> Iterable[Row]:
    """tests.bench.captive_bench on a scratch database seeded with the demo's 50 members."""
    import json

    dbname = f"{DB_PREFIX}_captive"
    url = _fresh_database(dbname)
    _seed(url, 50)
    run_dir = ROOT / "var/run"
    env = dict(
        _seed_env(url),
        REDIS_URL=f"unix://{run_dir}/redis.sock?db=3",
        CELERY_BROKER_URL=f"redis+socket://{run_dir}/redis.sock?virtual_host=3",
    )
    env.pop("PORTAL_FIREWALL_DEBOUNCE", None)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.captive_bench"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    yield (
        f"{r['rounds']} walled devices registered one after another: not captive, page loaded",
        str(r["done"]),
        "",
        str(r["rounds"]),
    )
    yield (
        "API call -> renewed (client-renew every 0.2 s) -> page by name, p50",
        f"{r['p50']:.2f}",
        "s",
        "",
    )
    yield (f"  same, p95 (max {r['max']:.2f} s)", f"{r['p95']:.2f}", "s", "< 3 s")


@benchmark("HA pair: 1,000 flows through 10 failovers and 10 failbacks; conntrackd sync load (lab)")
def ha_failover() -> Iterable[Row]:
    """tests.bench.ha_bench on a scratch database seeded with the demo's 50 members."""
    import json

    dbname = f"{DB_PREFIX}_ha"
    url = _fresh_database(dbname)
    _seed(url, 50)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.ha_bench"],
        cwd=ROOT, env=_seed_env(url), check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    yield (
        "flows (600 SNAT, 200 DNAT, 150 IPv6, 50 UDP TCP/UDP echo every 100 ms)",
        str(r["flows"]),
        "",
        "1000",
    )
    yield ("connections lost (reset, stalled or never opened)", str(r["lost"]), "", "0")
    yield (
        "failover (host-down nat1): longest silence of any flow, p50",
        f"{r['failover_p50']:.2f}",
        "s",
        "",
    )
    yield ("  same, p95", f"{r['failover_p95']:.2f}", "s", "< 1 s")
    yield (
        "failback (host-up, roles return after 2 s): longest silence, p50",
        f"{r['failback_p50']:.2f}",
        "s",
        "",
    )
    yield ("  same, p95", f"{r['failback_p95']:.2f}", "s", "< 1 s")
    yield (
        "forwarding restored (links down -> backup primary and states committed), p50",
        f"{r['restored_ms_p50']:.0f}",
        "ms",
        "",
    )
    yield ("  same, p95", f"{r['restored_ms_p95']:.0f}", "ms", "< 1000 ms")
    yield (
        "UDP flows (no retransmission backoff): longest silence at a failover, p95",
        f"{r['udp_failover_p95']:.2f}",
        "s",
        "",
    )
    yield (
        "VRRP takeover seen by lab.sh host-down (polling included), p50",
        f"{r['takeover_ms_p50']:.0f}",
        "ms",
        "",
    )
    yield (
        f"sync load: new connections per second (hping3, 30,000 in {r['sync_seconds']} s)",
        str(r["sync_new_per_second"]),
        "/s",
        "10,000",
    )
    yield ("  conntrackd messages sent per second", str(r["sync_messages_per_second"]), "/s", "")
    yield ("  conntrackd CPU (one core = 100 %)", f"{r['conntrackd_cpu_percent']:.1f}", "%", "")


def _scratch_run(module: str, *, name: str) -> Iterable[Row]:
    """`python -m module` in a fresh scratch database <prefix>_<name> (migrated, its own cache
    prefix); its last line of stdout is a JSON list of rows."""
    import json

    dbname = f"{DB_PREFIX}_{name}"
    host = str(ROOT / "var/run")
    subprocess.run(
        ["dropdb", "-h", host, "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(["createdb", "-h", host, "-U", "portal", dbname], check=True)
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgresql://portal@/{dbname}?host={host}",
        CACHE_KEY_PREFIX=f"portal-bench-{name}",
        DEBUG="1",
        LOG_LEVEL="WARNING",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    yield from (tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1]))


@benchmark("Traffic per member: one collection on the host and in the portal (20,000 / 100,000)")
def traffic_collection() -> Iterable[Row]:
    """tests.bench.traffic_bench on the seed_demo databases of each size."""
    import json

    for members in (20000, 100000):
        env = {**_seed_env(_seeded_database_url(members)), "BENCH_MEMBERS": str(members)}
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench.traffic_bench"],
            cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if out.returncode:
            tail = " | ".join(out.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"traffic_bench failed: {tail}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        p = r["portal"]
        tag = f"{members:,} members"
        if "host" in r:
            h = r["host"]
            ratio = h["load_accounting"] / h["load_plain"] if h["load_plain"] else 0
            yield (
                f"{tag} (synthetic rule set, {h['keys']:,} accounting keys): full load without "
                "/ with the accounting (without: no in sets, the out sets without counters, "
                "as anti-spoofing needs them)",
                f"{h['load_plain']:.2f} / {h['load_accounting']:.2f} ({ratio:.2f}x)",
                "s",
                "",
            )
            yield (
                f"{tag}: host, the helper's traffic verb (netlink read + totals), answer size",
                f"{h['verb_seconds']:.2f} ({h['answer_bytes'] / 1e6:.1f} MB, {h['rows']:,} rows)",
                "s",
                "",
            )
            yield (
                f"{tag}: host, full replacement by the agent's loader, to its answer, bare / carrying the counters (read while the loader parses; every key counted)",
                f"{h['replace_bare']:.2f} / {h['replace_carrying']:.2f}",
                "s",
                "",
            )
            yield (
                f"{tag}: host, that carry: the reading ({h['carried_keys']:,} keys) / from its end to the commit (not carried) / the fold after the answer",
                f"{h['carry_read']:.2f} / {h['carry_uncounted']:.2f} / {h['carry_fold']:.2f}",
                "s",
                "",
            )
        yield (
            f"{tag} (seed_demo: {p['rows']:,} keys): portal, first reading (every key new)",
            f"{p['first_seconds']:.2f}",
            "s",
            "",
        )
        yield (
            f"{tag}: portal, next reading (every key changed; {p['buckets']:,} bucket rows, "
            f"{p['counters']:,} counter rows)",
            f"{p['second_seconds']:.2f}",
            "s",
            "< interval (300 s)",
        )
        yield (f"{tag}: portal, the same totals again", f"{p['unchanged_seconds']:.2f}", "s", "")
        if "parse_seconds" in p:
            yield (
                f"{tag}: portal, the host's answer parsed (JSON + validation), before the store",
                f"{p['parse_seconds']:.2f}",
                "s",
                "",
            )
        if members == 100000 and "parse_seconds" in p:
            yield (
                f"{tag}: portal time of one interval (parse + next reading)",
                f"{p['parse_seconds'] + p['second_seconds']:.2f}",
                "s",
                "< 30 s",
            )


@benchmark(
    "Sites: 100,000 members across 5 sites (portal-wide traffic, health and leases, one site's "
    "compile)"
)
def sites_portal_wide() -> Iterable[Row]:
    """tests.bench.sites_bench on the 100,000-member seed_demo database split into 5 sites
    (seed_demo --sites 5 on top of it: sites and hosts only, seconds)."""
    import json

    url = _seeded_database_url(100000)
    subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--members", "100000", "--sites", "5"],
        cwd=ROOT, env=_seed_env(url), check=True, capture_output=True, text=True,
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.sites_bench"],
        cwd=ROOT, env=_seed_env(url), check=True, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    t = r["traffic"]
    tag = f"{r['members']:,} members, {r['sites']} sites"
    for label, what in (("first", "first reading (every key new)"), ("next", "next reading")):
        x = t[label]
        yield (
            f"{tag}: traffic, {what} of all {t['hosts']} hosts ({t['keys']:,} keys): "
            f"parse {x['parse']:.2f} + store {x['store']:.2f}; slowest host {x['worst_host']:.2f} s",
            f"{x['parse'] + x['store']:.2f}",
            "s",
            "< 30 s" if label == "next" else "",
        )
    yield (
        f"{tag}: traffic rows kept ({t['counters']:,} counters, {t['buckets']:,} hour buckets)",
        f"{t['counters'] + t['buckets']:,}",
        "rows",
        "",
    )
    h = r["health"]
    yield (f"{tag}: health, one round's samples stored ({h['rows']} rows: one per host)",
           f"{h['seconds'] * 1000:.0f}", "ms", "")  # fmt: skip
    le = r.get("leases")
    if le:
        for label, what, target in (
            ("first", "first reading (every lease new)", ""),
            ("same", "the same leases again (the common 15 s round: nothing renewed)",
             f"< interval ({le['interval']} s)" if "interval" in le else ""),
            ("renewed", "every lease renewed at once (a mass reconnect)", ""),
        ):  # fmt: skip
            x = le[label]
            yield (
                f"{tag}: DHCP leases, {what} of all {le['hosts']} hosts ({le['leases']:,} "
                f"leases, {x['written']:,} rows written): parse {x['parse']:.2f} + store "
                f"{x['store']:.2f}; slowest host {x['worst_host']:.2f} s",
                f"{x['parse'] + x['store']:.2f}",
                "s",
                target,
            )
        if "full_bytes" in le:
            yield (
                f"{tag}: DHCP leases, a full reading's answers of all {le['hosts']} hosts "
                f"({le['leases']:,} leases; what every 15 s round sent before issue 26)",
                f"{le['full_bytes'] / 1e6:.1f}",
                "MB",
                "",
            )
        for label, what in (
            ("cursor_none", "nothing changed"),
            ("cursor_100", "100 leases renewed on each host"),
        ):
            x = le.get(label)
            if x:
                yield (
                    f"{tag}: DHCP leases, a round from the cursor, {what}, all {le['hosts']} "
                    f"hosts ({x['bytes']:,} bytes of answers, {x['written']:,} rows written; "
                    f"slowest host {x['worst_host'] * 1000:.1f} ms): parse + store + cursor",
                    f"{x['seconds'] * 1000:.1f}",
                    "ms",
                    "",
                )
    for key, where, target in (
        ("compile_site", "a host of demo-1", "< 20 ms"),
        ("compile_all", "a host serving every building", "< 50 ms"),
    ):
        c = r[key]
        what = f"{tag}: steady compile of one member's change, {where} ({c['members']:,} networked members in the site)"
        yield (
            f"{what}: delta path, the member read by id + its increment (median of 10; best "
            f"{c['delta_best'] * 1000:.1f} ms; the read by id alone, median "
            f"{c['delta_read_median'] * 1000:.1f} ms)",
            f"{c['delta_median'] * 1000:.1f}",
            "ms",
            target,
        )
        yield (
            f"  the worker's delta_compile: read of the members changed since its last read "
            f"{c['worker_read_median'] * 1000:.0f} ms, the host's snapshot, the changed members, "
            f"the step, the version row (median of 10; {c['worker_steps']} of 10 were steps)",
            f"{c['worker_median'] * 1000:.0f}",
            "ms",
            "",
        )
        yield (
            f"  the same change through the full path (database -> snapshot "
            f"{c['read'] * 1000:.0f} ms; -> text)",
            f"{c['total'] * 1000:.0f}",
            "ms",
            "",
        )
        yield (
            f"  the delta base, built from a full compile (once per full compile); after ten "
            f"steps its digest equals a fresh full compile's: {'yes' if c['delta_equal'] else 'NO'}",
            f"{c['delta_base']:.2f}",
            "s",
            "",
        )


@benchmark(
    "tc layouts: the full shaping tree at 12,500 to 50,000 classes, side by side (namespace)"
)
def tc_layouts() -> Iterable[Row]:
    """tests.bench.tc_layouts_bench (root; the lab lock is the caller's, as for every section)."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.tc_layouts_bench"],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    for r in json.loads(out.stdout.strip().splitlines()[-1])["results"]:
        note = f" (failed: {r['failed'][:80]})" if r["failed"] else ""
        if r.get("kind") == "order":
            yield (
                f"first build, {r['classes']:,} classes over 2 links, mq8, member classes "
                f"{r['order']}: tc -batch wall time [CPU: kernel {r['sys']:.2f} s]{note}",
                f"{r['wall']:.2f}",
                "s",
                "",
            )
            continue
        if r.get("kind") == "beside":
            yield (
                f"first build, {r['classes']:,} classes on a third link (mq8) while "
                f"{r['beside']:,} classes exist on the other two: tc -batch wall time "
                f"[CPU: kernel {r['sys']:.2f} s]{note}",
                f"{r['wall']:.2f}",
                "s",
                "",
            )
            continue
        yield (
            f"{r['classes']:,} classes over 2 links, layout {r['layout']}: tc -batch wall time "
            f"[CPU: kernel {r['sys']:.2f} s, tc {r['user']:.2f} s]{note}",
            f"{r['wall']:.2f}",
            "s",
            "< 8 s" if r["classes"] == 50000 else "",
        )
        if "again" in r:
            a = r["again"]
            yield (
                f"{r['classes']:,} classes over 2 links, layout {r['layout']}: the same classes "
                f"again onto the tree just built (class replace, tree kept) [CPU: kernel "
                f"{a['sys']:.2f} s]",
                f"{a['wall']:.2f}",
                "s",
                "< 8 s" if r["classes"] == 50000 else "",
            )
        if "keep" in r:
            k = r["keep"]
            knote = f" (failed: {k['failed'][:80]})" if k["failed"] else ""
            how = "kept" if k.get("kept") else "built anew"
            yield (
                f"{r['classes']:,} classes over 2 links, layout {r['layout']}: the next compile's "
                f"tree (5 % gone, 5 % new, 5 % changed) as the host agent loads a full tree "
                f"(tree {how}; plan {k['plan']:.2f} s) [CPU: kernel {k['sys']:.2f} s]{knote}",
                f"{k['wall']:.2f}",
                "s",
                "< 8 s" if r["classes"] == 50000 else "",
            )
        if "built" in r:
            lead = f"{r['classes']:,} classes over 2 links, layout {r['layout']}, a layout change"
            d, b, n = r["drop_before"], r["built"], r["drop_now"]
            bnote = f" (failed: {b['failed'][:80]})" if b["failed"] else ""
            yield (
                f"{lead}: the old tree dropped to pfifo as the host agent did before (link "
                f"after link; classes made in the compiler's order) [CPU: kernel {d['sys']:.2f} s]",
                f"{d['wall']:.2f}",
                "s",
                "",
            )
            yield (
                f"{lead}: the tree built anew by the host agent (classes grouped by HTB, the "
                f"last queue's first; plan {b['plan']:.2f} s) [CPU: kernel {b['sys']:.2f} s]{bnote}",
                f"{b['wall']:.2f}",
                "s",
                "< 8 s",
            )
            yield (
                f"{lead}: that tree dropped to pfifo as the host agent does now (the last link "
                f"first) [CPU: kernel {n['sys']:.2f} s]",
                f"{n['wall']:.2f}",
                "s",
                "",
            )


@benchmark("Tickets: mail ingest, mass reply, status page")
def tickets_mail_and_status() -> Iterable[Row]:
    """tests/bench/tickets_bench.py in a scratch database (real SMTP, real gunicorn)."""
    yield from _scratch_run("tests.bench.tickets_bench", name="tickets")


@benchmark(
    "Sign-in: server time of a login POST (password hasher, lockout, second factor, session)"
)
def login_post() -> Iterable[Row]:
    """tests/bench/login_bench.py in a scratch database (test client, full middleware stack)."""
    yield from _scratch_run("tests.bench.login_bench", name="login")


@benchmark("Room import: import_rooms with 100,000 rooms")
def rooms_import_file() -> Iterable[Row]:
    """tests/bench/rooms_import_bench.py in a scratch database (the command in a subprocess)."""
    yield from _scratch_run("tests.bench.rooms_import_bench", name="rooms")


@benchmark("Notifications: an outage for 5,000 members (declare request, background send)")
def notifications_outage() -> Iterable[Row]:
    """tests/bench/notifications_bench.py in a scratch database (real worker, SMTP sink)."""
    yield from _scratch_run("tests.bench.notifications_bench", name="notifications")


@benchmark("Health check: /healthz behind gunicorn (PostgreSQL, Redis, worker heartbeat)")
def healthz_latency() -> Iterable[Row]:
    """tests/bench/healthz_bench.py: gunicorn as portal-web.service starts it, DEBUG=0."""
    yield from _scratch_run("tests.bench.healthz_bench", name="healthz")


@benchmark("Alerts: webhook throughput, and alert -> incident on the off-site status page")
def alerts_chain() -> Iterable[Row]:
    """tests/bench/alerts_bench.py: gunicorn, a Celery worker, Prometheus and Alertmanager."""
    yield from _scratch_run("tests.bench.alerts_bench", name="alerts")


def _sections(text: str) -> dict[str, list[str]]:
    """The "## title" sections of an existing BENCHMARKS.md, by title."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = found.setdefault(line[3:], [])
        if current is not None:
            current.append(line)
    return found


def main(argv: list[str] | None = None) -> None:
    """Run every section (or those whose title contains an --only word) and write the file.

    With --only the other sections keep the figures of the file as it was.
    """
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORD",
        help="run only the sections whose title contains WORD (case-insensitive; repeatable)",
    )
    args = parser.parse_args(argv)
    wanted = [w.lower() for w in args.only]
    target = ROOT / "docs/BENCHMARKS.md"
    previous = _sections(target.read_text()) if wanted and target.exists() else {}
    os.environ.setdefault("PGHOST", str(ROOT / "var/run"))
    ran = (
        ""
        if not wanted
        else f" (only sections matching {', '.join(args.only)}; the others are from an earlier run)"
    )
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m tests.bench.run`); do not edit by hand.",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}{ran}.",
        "",
    ]
    for title, func in BENCHMARKS:
        if wanted and not any(w in title.lower() for w in wanted):
            if title in previous:
                lines += [*previous[title]]
                if lines[-1] != "":
                    lines.append("")
            continue
        lines += [f"## {title}", "", "| measurement | value | unit | target |", "|---|---|---|---|"]
        load_before, started = os.getloadavg(), dt.datetime.now(dt.UTC)
        try:
            for name, value, unit, target_ in func():
                lines.append(f"| {name} | {value} | {unit} | {target_} |")
                print(f"{title}: {name}: {value} {unit}")  # noqa: T201
        except Exception as exc:
            lines.append(f"| this section failed: {type(exc).__name__}: {exc} | | | |")
            print(f"{title}: FAILED: {exc}")  # noqa: T201
        load_after = os.getloadavg()
        lines.append(
            f"| run {started:%Y-%m-%d %H:%M} UTC, {(dt.datetime.now(dt.UTC) - started).seconds} s; "
            "machine load average (1, 5, 15 min) before / after | "
            f"{', '.join(f'{x:.2f}' for x in load_before)} / "
            f"{', '.join(f'{x:.2f}' for x in load_after)} |  |  |"
        )
        lines.append("")
    target.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
