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


@benchmark("Demo data")
def seed_demo_20k() -> Iterable[Row]:
    """seed_demo with 20,000 members into a scratch database."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings")
    dbname = "portal_bench"
    subprocess.run(
        ["dropdb", "-h", str(ROOT / "var/run"), "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(["createdb", "-h", str(ROOT / "var/run"), "-U", "portal", dbname], check=True)
    env["DATABASE_URL"] = f"postgresql://portal@/{dbname}?host={ROOT / 'var/run'}"
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    start = time.monotonic()
    subprocess.run(
        [py, "manage.py", "seed_demo", "--members", "20000"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    first = time.monotonic() - start
    start = time.monotonic()
    subprocess.run(
        [py, "manage.py", "seed_demo", "--members", "20000"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    again = time.monotonic() - start
    yield ("seed_demo --members 20000 (empty database)", f"{first:.1f}", "s", "< 60 s")
    yield ("seed_demo --members 20000 again (nothing to add)", f"{again:.1f}", "s", "")


def _bench_database_url(members: int = 20000) -> str:
    """The scratch database of the "Demo data" section (seeded again if it is missing)."""
    dbname = "portal_bench"
    url = f"postgresql://portal@/{dbname}?host={ROOT / 'var/run'}"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url)
    created = subprocess.run(
        ["createdb", "-h", str(ROOT / "var/run"), "-U", "portal", dbname],
        check=False,
        capture_output=True,
    )
    if created.returncode == 0:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
    subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--members", str(members)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return url


@benchmark("Office hours and resident dashboard (20,000 members, ~60,000 devices)")
def members_search_and_dashboard() -> Iterable[Row]:
    """member_search p95 per kind of query; the dashboard's query count at 1 and 10 devices."""
    import json

    url = _bench_database_url()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url)
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.members_bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for kind, figures in result["search"].items():
        yield (
            f"search p95: {kind} (p50 {figures['p50']:.1f} ms, {figures['n']} queries)",
            f"{figures['p95']:.1f}",
            "ms",
            "< 50 ms",
        )
    for devices, queries in sorted(result["dashboard_queries"].items(), key=lambda i: int(i[0])):
        yield (f"resident dashboard with {devices} device(s)", str(queries), "queries", "constant")


def _seeded_database_url(members: int) -> str:
    """A scratch database with `members` seed_demo members (kept between runs)."""
    if members == 20000:
        return _bench_database_url()
    dbname = f"portal_bench_{members}"
    url = f"postgresql://portal@/{dbname}?host={ROOT / 'var/run'}"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url)
    subprocess.run(
        ["createdb", "-h", str(ROOT / "var/run"), "-U", "portal", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--members", str(members)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return url


@benchmark("Firewall compile from the database (seed_demo data)")
def firewall_compile_from_database() -> Iterable[Row]:
    """Database -> snapshot -> nft text at 1,000, 5,000 and 20,000 members, vs a COPY floor."""
    import json

    for members in (1000, 5000, 20000):
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="portal.settings",
            DATABASE_URL=_seeded_database_url(members),
        )
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench.firewall_bench"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        big = members == 20000
        what = (
            f"{members:,} members ({r['members']:,} networked, {r['devices']:,} devices, "
            f"{r['forwards']:,} forwards, {r['openings']:,} openings, {r['shaped']:,} shaped; "
            f"{r['elements']:,} set elements)"
        )
        yield (
            f"{what}: database -> snapshot, cold (every member built)",
            f"{r['db_to_snapshot']:.3f}",
            "s",
            "< 1 s" if big else "",
        )
        yield (
            f"{what}: database -> snapshot, worker steady state (one member changed)",
            f"{r['warm_db_to_snapshot']:.3f}",
            "s",
            "< 1 s" if big else "",
        )
        yield (
            f"{what}: snapshot -> text",
            f"{r['snapshot_to_text']:.3f}",
            "s",
            "< 0.25 s" if big else "",
        )
        ratio = r["db_to_text"] / r["copy_floor"] if r["copy_floor"] else 0
        yield (
            f"{what}: database -> text, one cold pass (COPY floor {r['copy_floor']:.3f} s)",
            f"{r['db_to_text']:.3f} ({ratio:.1f}x floor)",
            "s",
            "<= 3x floor",
        )
        warm = r["warm_db_to_text"] / r["copy_floor"] if r["copy_floor"] else 0
        yield (
            f"{what}: database -> text, worker steady state (one member changed)",
            f"{r['warm_db_to_text']:.3f} ({warm:.1f}x floor)",
            "s",
            "<= 3x floor",
        )
        yield (
            f"{what}: peak memory of that pass",
            f"{r['peak_mb']:.0f}",
            "MB",
            "< 300 MB" if big else "",
        )
        yield (f"{what}: nft text", f"{r['text_mb']:.2f}", "MB", "< 12 MB" if big else "")
        yield (
            f"{what}: nft -f into a fresh namespace",
            f"{r['nft_load']:.2f}",
            "s",
            "< 2.5 s" if big else "",
        )


@benchmark("Rule-set compiler (synthetic snapshots; nft, tc and packets in namespaces)")
def compiler_synthetic() -> Iterable[Row]:
    """workers.ruleset.bench: compile, load, kernel memory, increments, classes, new flows."""
    from workers.ruleset.bench import run_benchmarks

    for section, name, value, unit, target in run_benchmarks(
        progress=lambda msg: print(f"  compiler: {msg}", flush=True)  # noqa: T201
    ):
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        yield (f"{section}: {name}", shown, unit, target)


@benchmark("From the API to a working forward (real worker, lab firewalls)")
def pipeline_latency() -> Iterable[Row]:
    """20 forwards one after another (API call -> first answer from pl-inet); a burst of 200."""
    import json

    dbname = "portal_bench_pipeline"
    run_dir = ROOT / "var/run"
    subprocess.run(
        ["dropdb", "-h", str(run_dir), "-U", "portal", "--if-exists", dbname],
        check=False,
        capture_output=True,
    )
    subprocess.run(["createdb", "-h", str(run_dir), "-U", "portal", dbname], check=True)
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
    yield (
        "debounce (PORTAL_FIREWALL_DEBOUNCE, the default)",
        f"{r['debounce']:.1f}",
        "s",
        "",
    )
    yield (
        "20 forwards one after another: API call -> answers from pl-inet, p50",
        f"{r['p50']:.2f}",
        "s",
        "",
    )
    yield (f"  same, p95 (max {r['max']:.2f} s)", f"{r['p95']:.2f}", "s", "< 2 s")
    yield (
        f"burst of 200 forwards (created in {r['burst_seconds_to_create']:.2f} s): all live",
        f"{r['burst_all_live']:.2f}",
        "s",
        "< 5 s",
    )
    yield ("  rollouts that burst took", str(r["burst_rollouts"]), "runs", "a handful")
    yield (
        "  first, middle and last of the burst answer from pl-inet",
        "yes" if r["burst_answering"] else "NO",
        "",
        "yes",
    )


@benchmark("Tickets: mail ingest, mass reply, status page")
def tickets_mail_and_status() -> Iterable[Row]:
    """tests/bench/tickets_bench.py in a scratch database (real SMTP, real gunicorn)."""
    import json

    dbname = "portal_bench_tickets"
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
        CACHE_KEY_PREFIX="portal-bench-tickets",
        DEBUG="1",
        LOG_LEVEL="WARNING",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.tickets_bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    yield from (tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    os.environ.setdefault("PGHOST", str(ROOT / "var/run"))
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m tests.bench.run`); do not edit by hand.",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
    ]
    for title, func in BENCHMARKS:
        lines += [f"## {title}", "", "| measurement | value | unit | target |", "|---|---|---|---|"]
        try:
            for name, value, unit, target in func():
                lines.append(f"| {name} | {value} | {unit} | {target} |")
                print(f"{title}: {name}: {value} {unit}")  # noqa: T201
        except Exception as exc:
            lines.append(f"| this section failed: {type(exc).__name__}: {exc} | | | |")
            print(f"{title}: FAILED: {exc}")  # noqa: T201
        lines.append("")
    (ROOT / "docs/BENCHMARKS.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
