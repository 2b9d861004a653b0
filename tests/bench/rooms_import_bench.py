"""`import_rooms` with 100,000 rooms: the command as an operator runs it, in a scratch database.

Run by tests/bench/run.py (`make bench`, or `python -m tests.bench.run --only "room import"`)
with DATABASE_URL set; prints one JSON list of rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]
BUILDINGS, ROOMS_PER_BUILDING = 100, 1000


def room_file(path: Path, *, bad_last_line: bool = False) -> int:
    """100 buildings x 1,000 rooms, each building with an IPv4 /16 and an IPv6 /48."""
    lines = ["building,building_name,room,ipv4_subnet,ipv6_prefix"]
    for b in range(BUILDINGS):
        code = f"H{b:02d}"
        for r in range(ROOMS_PER_BUILDING):
            nets = f"10.{b}.0.0/16,2001:db8:{b:x}::/48" if r == 0 else ","
            lines.append(f"{code},House {code},{r:04d},{nets}")
    if bad_last_line:
        lines.append("Z,House Z,1,2001:db8:ffff::/48,10.250.0.0/16")  # swapped columns
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def run(path: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", "import_rooms", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.monotonic() - start, done


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from apps.members.models import Room

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.csv"
        count = room_file(bad, bad_last_line=True)
        seconds, done = run(bad)
        assert done.returncode == 1, done.stderr
        assert f"Line {count + 1}:" in done.stderr, done.stderr
        assert not Room.objects.exists()
        rows.append(
            (
                f"import_rooms, {count - 1:,} good lines and a bad last one: refused, "
                "nothing imported",
                f"{seconds:.1f}",
                "s",
                "",
            )
        )
        good = Path(tmp) / "rooms.csv"
        count = room_file(good)
        seconds, done = run(good)
        assert done.returncode == 0, done.stderr
        assert Room.objects.count() == count
        rows.append(
            (
                f"import_rooms, {count:,} rooms in {BUILDINGS} buildings (empty database)",
                f"{seconds:.1f}",
                "s",
                "< 60 s",
            )
        )
        seconds, done = run(good)
        assert done.returncode == 0, done.stderr
        assert f"{count} rooms existed already" in done.stdout, done.stdout
        rows.append(
            (
                f"import_rooms, the same {count:,} rooms again (nothing to add)",
                f"{seconds:.1f}",
                "s",
                "",
            )
        )
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    main()
