"""Redis through Sentinel: a real primary, replica and three sentinels; the primary is killed
while the portal makes changes through the cache, the firewall lock, the network-change record
and the Celery broker, with beat and a worker running. Every change the portal had been told was
done survives the failover, every task sent ran, and beat's heartbeat goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.utils import timezone

from apps.firewall.pipeline import firewall_causes_take, lock_key
from apps.health.heartbeat import HEARTBEAT_KEY
from portal.redis import redis_client, redis_reset
from portal.redisconf import RedisConfigError, redis_config_from_env
from tests.celery_proc import ROOT, celery_start, celery_stop, wait_until
from tests.ha import env_without, redis_sentinel_set
from tests.ha_procs.redis_tasks import DONE_KEY

SITE = 9001  # a site id of the test's own: the writer never reads the database
CHANGES = 60
KILL_AFTER = 15


@pytest.fixture
def sentinel_settings(settings):
    """Point this test process's portal at a set of sentinels (like the env would)."""

    def use(env: dict[str, str]) -> None:
        settings.REDIS = redis_config_from_env(env, default_url="", default_broker_url="")
        settings.REDIS_URL = settings.REDIS.describe()
        caches = {"default": dict(settings.CACHES["default"], LOCATION=settings.REDIS_URL)}
        settings.CACHES = caches  # Django drops its cache connections on this change
        redis_reset()

    yield use
    redis_reset()


def _read_lines(proc: subprocess.Popen, into: list[dict]) -> None:
    for line in proc.stdout:
        if line.startswith("{"):
            into.append(json.loads(line))


def test_a_killed_primary_fails_over_and_nothing_acknowledged_is_lost(tmp_path, sentinel_settings):
    with redis_sentinel_set(tmp_path / "redis") as rset:
        ha_env = rset.env()
        beat_env = {**ha_env, "PORTAL_HEARTBEAT_INTERVAL": "1", "PORTAL_BEAT_LOCK_TIMEOUT": "3"}
        beat = celery_start(
            "beat",
            "--scheduler",
            "portal.celery:PortalScheduler",
            log=tmp_path / "beat.log",
            env=beat_env,
            unset=("REDIS_URL", "CELERY_BROKER_URL"),
        )
        worker = celery_start(
            "worker",
            "-Q",
            "celery",
            "--pool",
            "threads",
            "--concurrency",
            "2",
            "--include",
            "tests.ha_procs.redis_tasks",
            "--hostname",
            f"ha-{rset.primary_port}@%h",
            "--without-mingle",
            "--without-gossip",
            log=tmp_path / "worker.log",
            env=beat_env,
            unset=("REDIS_URL", "CELERY_BROKER_URL"),
        )
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.ha_procs.redis_writer", str(CHANGES), str(SITE)],
            cwd=ROOT,
            env=env_without("REDIS_URL", "CELERY_BROKER_URL", **ha_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        acked: list[dict] = []
        reader = threading.Thread(target=_read_lines, args=(writer, acked), daemon=True)
        reader.start()
        try:
            assert wait_until(lambda: len(acked) >= KILL_AFTER, 30), rset.logs()
            killed_at = time.monotonic()
            killed_wall = timezone.now()
            rset.kill_primary()
            assert writer.wait(timeout=45) == 0, rset.logs()
            reader.join(timeout=5)
            failover = time.monotonic() - killed_at

            # The sentinels promoted the replica; every change was acknowledged, none failed:
            # the failover was a pause, not an error.
            assert rset.current_primary_port() == rset.replica_port
            assert [a["i"] for a in acked] == list(range(CHANGES))
            longest = max(a["took"] for a in acked)
            assert longest < 15, acked

            sentinel_settings(ha_env)
            from django.core.cache import cache

            assert [cache.get(f"ha:{i}") for i in range(CHANGES)] == list(range(CHANGES))
            causes, _ = firewall_causes_take(SITE)
            assert causes == [f"change {i}" for i in range(CHANGES)]
            assert not redis_client().exists(lock_key(SITE))  # released on the new primary
            done = wait_until(lambda: redis_client().scard(DONE_KEY) >= CHANGES, 30)
            ran = {int(i) for i in redis_client().smembers(DONE_KEY)}
            assert done, (sorted(set(range(CHANGES)) - ran), (tmp_path / "worker.log").read_text())
            assert ran == set(range(CHANGES))
            # Beat (its lock and schedule in Redis) and the worker carry on: the heartbeat that
            # beat sends and the worker records is newer than the failover.
            beaten = wait_until(lambda: _heartbeat_at() > killed_wall + timedelta(seconds=3), 20)
            assert beaten, ((tmp_path / "beat.log").read_text()[-2000:], _heartbeat_at())
            print(f"failover pause: longest change {longest:.2f} s; all done {failover:.1f} s")  # noqa: T201
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=5)
            celery_stop(worker)
            celery_stop(beat)


def _heartbeat_at() -> datetime:
    raw = redis_client().hget(HEARTBEAT_KEY, "at")
    return datetime.fromisoformat(raw) if raw else datetime.min.replace(tzinfo=UTC)


def test_sentinel_settings_exclude_a_redis_url():
    env = {"REDIS_SENTINELS": "10.0.0.1:26379", "REDIS_SENTINEL_MASTER": "portal"}
    with pytest.raises(RedisConfigError, match="REDIS_URL must not be"):
        redis_config_from_env(
            dict(env, REDIS_URL="redis://x/0"), default_url="", default_broker_url=""
        )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_SENTINELS": "10.0.0.1"}, "not host:port"),
        ({"REDIS_SENTINELS": "10.0.0.1:99999"}, "not host:port"),
        ({"REDIS_SENTINELS": "[::1:26379"}, "not host:port"),
        ({"REDIS_SENTINELS": "10.0.0.1:26379"}, "REDIS_SENTINEL_MASTER must name"),
        (
            {"REDIS_SENTINELS": "h:1", "REDIS_SENTINEL_MASTER": "p", "REDIS_DB": "x"},
            "REDIS_DB='x'",
        ),
    ],
)
def test_bad_sentinel_settings_are_named(env, message):
    with pytest.raises(RedisConfigError, match=message):
        redis_config_from_env(env, default_url="", default_broker_url="")


def test_sentinel_settings_reach_every_redis_user():
    config = redis_config_from_env(
        {
            "REDIS_SENTINELS": "10.0.0.1:26379, [fd00::2]:26380",
            "REDIS_SENTINEL_MASTER": "portal",
            "REDIS_PASSWORD": "p@ss",
            "REDIS_SENTINEL_PASSWORD": "s3",
            "REDIS_DB": "2",
        },
        default_url="",
        default_broker_url="",
    )
    assert config.sentinels == (("10.0.0.1", 26379), ("fd00::2", 26380))
    assert config.describe() == "sentinel://10.0.0.1:26379,[fd00::2]:26380/portal?db=2"
    assert "p@ss" not in repr(config)
    assert config.celery_broker_url() == (
        "sentinel://:p%40ss@10.0.0.1:26379/2;sentinel://:p%40ss@[fd00::2]:26380/2"
    )
    options = config.celery_transport_options()
    assert options["master_name"] == "portal"
    assert options["sentinel_kwargs"]["password"] == "s3"


def test_a_broken_setting_stops_the_portal_with_its_name():
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env_without(
            "REDIS_URL",
            "CELERY_BROKER_URL",
            REDIS_SENTINELS="10.0.0.1:26379",
            DJANGO_SETTINGS_MODULE="portal.settings",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "Configuration error: REDIS_SENTINEL_MASTER must name" in result.stderr
    assert "Traceback" not in result.stderr


def test_one_server_reports_a_dead_redis_at_once(sentinel_settings, tmp_path):
    """Without Sentinel there is no failover to wait for: no retries, an error within a second."""
    sentinel_settings({"REDIS_URL": f"unix://{tmp_path}/none.sock?db=0"})
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        redis_client().ping()
    assert time.monotonic() - started < 1
