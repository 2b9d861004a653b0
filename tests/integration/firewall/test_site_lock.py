"""A site's lock outlives a slow holder and dies with a killed one (SIGKILL, no cleanup)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from apps.firewall.pipeline import _ACQUIRE, _lock_take, lock_key
from apps.infra.redis import redis_client
from tests.celery_proc import wait_until

ROOT = Path(__file__).resolve().parents[3]
SITE = 990_777
HOLDER = f"""
import django, time
django.setup()
from apps.firewall.pipeline import site_lock
with site_lock({SITE}):
    print("held", flush=True)
    time.sleep(600)
"""


def test_the_default_expiry_frees_a_dead_holders_lock_within_30_seconds():
    assert 0 < settings.PORTAL_FIREWALL_LOCK_TTL <= 30


def test_a_killed_holder_frees_the_site_within_its_expiry(firewall_redis_clean):
    ttl = 3
    env = dict(
        os.environ, DJANGO_SETTINGS_MODULE="portal.settings_test", PORTAL_FIREWALL_LOCK_TTL=str(ttl)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        token = redis_client().get(lock_key(SITE))
        time.sleep(ttl * 2)  # twice the expiry: the living holder keeps renewing it
        assert redis_client().get(lock_key(SITE)) == token
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        assert wait_until(lambda: redis_client().get(lock_key(SITE)) is None, ttl + 5, 0.05)
        assert time.monotonic() - killed <= ttl + 0.5
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()


def test_taking_the_lock_again_with_its_own_token_keeps_it(firewall_redis_clean):
    """A retry after a failover (the first reply lost with the primary, the key already on the
    replica) finds its own token: the holder keeps its lock instead of waiting for itself."""
    client = redis_client()
    key = lock_key(SITE)
    assert _lock_take(client, key, "mine", 5000)
    client.pexpire(key, 1000)
    with client.pipeline(transaction=False) as pipe:  # the retried attempt, past the busy check
        pipe.eval(_ACQUIRE, 1, key, "mine", 5000)
        assert pipe.execute() == [1]
    assert client.pttl(key) > 4000  # renewed to the full expiry
    assert not _lock_take(client, key, "theirs", 5000)
    assert client.get(key) == "mine"
