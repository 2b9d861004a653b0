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
        for name, value, unit, target in func():
            lines.append(f"| {name} | {value} | {unit} | {target} |")
            print(f"{title}: {name}: {value} {unit}")  # noqa: T201
        lines.append("")
    (ROOT / "docs/BENCHMARKS.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
