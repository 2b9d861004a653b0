"""Real Celery worker processes for tests, pointed at the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
CELERY = str(Path(sys.executable).with_name("celery"))


def test_database_url() -> str:
    """DATABASE_URL of the database this test process uses (the test database)."""
    db = connection.settings_dict
    auth = quote(db["USER"], safe="") + (
        f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    )
    host = db.get("HOST") or db.get("OPTIONS", {}).get("host", "")
    port = db.get("PORT") or 5432
    # A socket directory goes percent-encoded in the host part (dj-database-url reads it back).
    return f"postgresql://{auth}@{quote(str(host), safe='')}:{port}/{db['NAME']}"


def celery_start(
    *args: str, log: Path, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> subprocess.Popen[Any]:
    """Start `celery -A portal ARGS` in its own process group, logging to `log`; `unset` names
    variables of this process's environment that the worker must not see."""
    full_env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="portal.settings_test",
        DATABASE_URL=test_database_url(),
        **(env or {}),
    )
    for name in ("DJANGO_ALLOW_ASYNC_UNSAFE", *unset):
        full_env.pop(name, None)
    handle = open(log, "w")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [CELERY, "-A", "portal", *args],
        cwd=ROOT,
        env=full_env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def beat_start(
    name: str, tmp_path: Path, env: dict[str, str], *, unset: tuple[str, ...]
) -> subprocess.Popen[Any]:
    """Start a beat with the portal's scheduler, logging at INFO to `tmp_path/<name>.log`."""
    return celery_start(
        "beat",
        "--scheduler",
        "apps.infra.celery:PortalScheduler",
        "--loglevel",
        "INFO",
        log=tmp_path / f"{name}.log",
        env=env,
        unset=unset,
    )


def celery_stop(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Stop the process group (TERM, then KILL)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
