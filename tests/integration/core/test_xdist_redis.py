"""`pytest -n N` (pytest-xdist): each worker has a test database of its own (pytest-django) and
a Redis database of its own (portal/settings_test.py), so one worker's locks, cache entries,
marks and Celery queues are never another's. Checked with a real `pytest -n 2 --dist each`: the
same test runs on both workers at once, each writes its name and reads it back after the
other one wrote too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

BOTH_AT_ONCE = """
import os
import time
from pathlib import Path

from django.core.cache import cache

from apps.infra.celery import app
from apps.infra.redis import redis_client

BARRIER = Path(os.environ["XDIST_REDIS_BARRIER"])


def test_this_workers_redis_is_its_own():
    me = os.environ["PYTEST_XDIST_WORKER"]
    client = redis_client()
    client.set("portal:test:xdist-owner", me)
    cache.set("xdist-owner", me)
    (BARRIER / f"{me}.broker").write_text(app.conf.broker_url)
    deadline = time.monotonic() + 60
    while len(list(BARRIER.glob("*.broker"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(BARRIER.glob("*.broker"))) == 2, "the other worker did not write"
    try:
        assert client.get("portal:test:xdist-owner") == me
        assert cache.get("xdist-owner") == me
    finally:
        client.delete("portal:test:xdist-owner")
        cache.delete("xdist-owner")
"""


def test_two_xdist_workers_each_have_their_own_redis(tmp_path):
    (tmp_path / "test_both_at_once.py").write_text(BOTH_AT_ONCE)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["XDIST_REDIS_BARRIER"] = str(barrier)
    env.pop("REDIS_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(ROOT), "-n", "2", "--dist", "each", "-q", "-p", "no:randomly",
         str(tmp_path / "test_both_at_once.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
    brokers = {path.stem: path.read_text() for path in barrier.glob("*.broker")}
    assert set(brokers) == {"gw0", "gw1"}
    assert brokers["gw0"] != brokers["gw1"]
