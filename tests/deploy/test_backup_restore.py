"""The backup guide of docs/operations.md, end to end: pg_dump the portal's database, restore it
into a fresh PostgreSQL cluster started here, point the portal at it, and the restored portal
compiles the same bundle (the same version hash) for every firewall host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from apps.firewall.models import FirewallHost, Site
from apps.firewall.snapshot import firewall_snapshot_build
from tests.factories import (
    RoomFactory,
    device_add,
    forward_add,
    member_active,
    member_on_test,
    opening_add,
    pool_create,
)
from workers.ruleset import compile_bundle

ROOT = Path(__file__).resolve().parents[2]
PGBIN = max(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))

pytestmark = pytest.mark.django_db(transaction=True)


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL's server refuses root: run it as the Debian 'postgres' user when we are root."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert result.returncode == 0, f"{args[0]}: {result.stderr}"
    return result


@pytest.fixture
def fresh_cluster() -> Iterator[Path]:
    """A new, empty PostgreSQL cluster on a Unix socket in a temporary directory."""
    base = Path(tempfile.mkdtemp(prefix="portal-restore-"))
    data, run = base / "data", base / "run"
    run.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(run, "postgres")
    _run(_as_postgres([str(PGBIN / "initdb"), "-D", str(data), "-U", "portal", "--auth=trust",
                       "-E", "UTF8", "--locale=C.UTF-8"]))  # fmt: skip
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(f"listen_addresses = ''\nunix_socket_directories = '{run}'\nfsync = off\n")
    _run(_as_postgres([str(PGBIN / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w",
                       "start"]))  # fmt: skip
    try:
        yield run
    finally:
        subprocess.run(
            _as_postgres([str(PGBIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


def _a_site() -> list[FirewallHost]:
    """Two sites' worth of network: buildings, rooms, members, devices, forwards, openings."""
    pool_create()
    hosts = [
        FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11"),
        FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12"),
    ]
    north = Site.objects.create(name="north")
    hosts.append(FirewallHost.objects.create(name="n-fw1", address="10.255.255.13", site=north))
    for n in range(6):
        member = member_active(room=RoomFactory())
        laptop = device_add(member, f"laptop-{n}")
        device_add(member, f"phone-{n}")
        forward_add(member, laptop, ports=f"{8000 + n}")
        forward_add(member, laptop, ports=f"{27000 + n}-{27002 + n}", protocol="udp")
        opening_add(laptop, "22")
    north.buildings.add(member.room.building)
    on_test = member_on_test(days=10)
    device_add(on_test, "test-laptop")
    return hosts


def test_a_restored_dump_compiles_the_same_bundles(fresh_cluster: Path, tmp_path: Path) -> None:
    hosts = _a_site()
    before = {h.name: compile_bundle(firewall_snapshot_build(host=h)).content_hash for h in hosts}
    assert len(set(before.values())) >= 2  # the sites differ, so the comparison means something

    # The backup, as the guide says: pg_dump in the custom format.
    db = connection.settings_dict
    dump = tmp_path / "portal.dump"
    _run([str(PGBIN / "pg_dump"), "-Fc", "-h", str(db["HOST"]), "-U", db["USER"], "-d",
          db["NAME"], "-f", str(dump)])  # fmt: skip
    assert dump.stat().st_size > 10_000

    # The restore into the fresh cluster, as the guide says.
    socket = str(fresh_cluster)
    _run([str(PGBIN / "createdb"), "-h", socket, "-U", "portal", "portal"])
    _run([str(PGBIN / "pg_restore"), "-h", socket, "-U", "portal", "-d", "portal", "--no-owner",
          "--exit-on-error", str(dump)])  # fmt: skip

    # The portal pointed at the restored database: its schema is current, and it compiles the
    # same bundles.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DATABASE_URL"] = f"postgresql://portal@{urllib.parse.quote(socket, safe='')}/portal"
    env["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    manage = [sys.executable, "manage.py"]
    _run([*manage, "migrate", "--check"], cwd=ROOT, env=env)
    out = _run([*manage, "compile_rules", "--hash"], cwd=ROOT, env=env).stdout
    after = dict(line.split() for line in out.splitlines())
    assert after == before
