"""Redis through Sentinel: a real primary, replica and three sentinels; the primary is killed
while the portal makes changes through the cache, the firewall lock, the network-change record
and the Celery broker, with two beats (one active) and a worker running. Every change the portal
had been told was done survives the failover, every task sent ran, beat goes on through the
failover, and when the active beat dies afterwards the other one takes over."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.utils import timezone

from apps.firewall.pipeline import firewall_causes_take, lock_key
from apps.infra.heartbeat import HEARTBEAT_KEY
from apps.infra.redis import ReplicaWait, redis_client, redis_reset
from apps.infra.redisconf import RedisConfigError, redis_config_from_env
from tests.celery_proc import ROOT, beat_start, celery_start, celery_stop, wait_until
from tests.ha import env_without, redis_sentinel_set
from tests.ha_procs.redis_tasks import DONE_KEY

SITE = 9001  # a site id of the test's own: the writer never reads the database
CHANGES = 60
KILL_AFTER = 15
LOCK_TIMEOUT = 3  # beat's lock, seconds (beat ticks every second)
STALL = 0.4  # seconds the replica receives nothing before the primary is killed
WAIT_TIMEOUT_MS = 1500  # at most half beat's lock timeout (settings refuse more)
SENT = "Sending due task heartbeat"  # beat's log line for each heartbeat it sends


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


def _read_lines(proc: subprocess.Popen, into: list[dict], other: list[str]) -> None:
    for line in proc.stdout:
        if line.startswith("{"):
            into.append(json.loads(line))
        else:
            other.append(line)


def _worker(log, env: dict[str, str], *args: str) -> subprocess.Popen:
    """A worker of two threads that knows the test's tasks, on the set in `env`."""
    return celery_start(
        "worker",
        "-Q",
        "celery",
        "--pool",
        "threads",
        "--concurrency",
        "2",
        "--include",
        "tests.ha_procs.redis_tasks",
        "--without-mingle",
        "--without-gossip",
        *args,
        log=log,
        env=env,
        unset=("REDIS_URL", "CELERY_BROKER_URL"),
    )


def _beat(name: str, tmp_path, env: dict[str, str]) -> subprocess.Popen:
    return beat_start(name, tmp_path, env, unset=("REDIS_URL", "CELERY_BROKER_URL"))


def test_a_killed_primary_fails_over_and_nothing_acknowledged_is_lost(tmp_path, sentinel_settings):
    procs: dict[str, subprocess.Popen] = {}
    log = lambda name: (tmp_path / f"{name}.log").read_text()  # noqa: E731
    with redis_sentinel_set(tmp_path / "redis") as rset:
        # WAIT's time-out well above the replication stall below: the stall must end in the
        # kill, not in a time-out that lets the writer go on unreplicated.
        ha_env = {**rset.env(), "REDIS_WAIT_TIMEOUT_MS": str(WAIT_TIMEOUT_MS)}
        beat_env = {
            **ha_env,
            "PORTAL_HEARTBEAT_INTERVAL": "1",
            "PORTAL_BEAT_LOCK_TIMEOUT": str(LOCK_TIMEOUT),
        }
        try:
            procs["beat-a"] = _beat("beat-a", tmp_path, beat_env)
            procs["worker"] = _worker(
                tmp_path / "worker.log", beat_env, "--hostname", f"ha-{rset.primary_port}@%h"
            )
            assert wait_until(lambda: SENT in log("beat-a"), 40), log("beat-a")[-2000:]
            procs["beat-b"] = _beat("beat-b", tmp_path, beat_env)
            assert wait_until(lambda: "beat: Starting" in log("beat-b"), 40), log("beat-b")
            writer = procs["writer"] = subprocess.Popen(
                [sys.executable, "-m", "tests.ha_procs.redis_writer", str(CHANGES), str(SITE)],
                cwd=ROOT,
                env=env_without("REDIS_URL", "CELERY_BROKER_URL", **ha_env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            acked: list[dict] = []
            said: list[str] = []
            reader = threading.Thread(target=_read_lines, args=(writer, acked, said), daemon=True)
            reader.start()
            assert wait_until(lambda: len(acked) >= KILL_AFTER, 40), (said, rset.logs())
            # The replica falls behind (its link holds what the primary sends), and the
            # primary dies while the writer goes on: what the primary acknowledged in those
            # moments never reaches the replica the sentinels promote.
            rset.freeze_replication()
            time.sleep(STALL)
            acked_at_kill = len(acked)
            killed_at = time.monotonic()
            killed_wall = timezone.now()
            rset.kill_primary()
            code = writer.wait(timeout=45)
            (tmp_path / "writer.log").write_text("".join(said))
            assert code == 0, ("".join(said)[-3000:], rset.logs())
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

            # Cache entries are not waited for, but each one a change wrote before its
            # acknowledgement reached the replica with it (one ordered stream): only the change
            # in progress at the kill may have lost its entry.
            lost = {i for i in range(CHANGES) if cache.get(f"ha:{i}") != i}
            assert lost <= {acked_at_kill}, lost
            causes, _ = firewall_causes_take(SITE)
            assert causes == [f"change {i}" for i in range(CHANGES)]
            assert not redis_client().exists(lock_key(SITE))  # released on the new primary
            done = wait_until(lambda: redis_client().scard(DONE_KEY) >= CHANGES, 30)
            ran = {int(i) for i in redis_client().smembers(DONE_KEY)}
            assert done, (sorted(set(range(CHANGES)) - ran), _worker_story(log("worker")))
            assert ran == set(range(CHANGES))

            # Beat carried on through the failover: the heartbeat is newer than it. (Beat's lock
            # may have expired during the failover and B taken over: either way one is active.)
            beaten = wait_until(lambda: _heartbeat_at() > killed_wall + timedelta(seconds=2), 20)
            assert beaten, (log("beat-a")[-2000:], log("beat-b")[-2000:], _heartbeat_at())

            # The active beat dies: the other takes over within the lock timeout.
            active, standby = sorted(("beat-a", "beat-b"), key=lambda n: _sends(log(n))[-1:])[::-1]
            os.killpg(procs[active].pid, signal.SIGKILL)
            procs[active].wait(timeout=5)
            beat_killed = time.monotonic()
            killed_wall = datetime.now(tz=UTC)
            took_over = wait_until(
                lambda: [t for t in _sends(log(standby)) if t > killed_wall], LOCK_TIMEOUT + 10
            )
            takeover = time.monotonic() - beat_killed
            assert took_over, log(standby)[-2000:]
            beaten = wait_until(lambda: _heartbeat_at() > killed_wall + timedelta(seconds=1), 15)
            assert beaten, (log(standby)[-2000:], log("worker")[-2000:])

            # One active at a time: never two heartbeats sent for one interval (a beat that
            # lost its lock while a publish waited goes back to waiting; it may change hands
            # more than once), and the survivor sends last.
            sends = sorted((t, n) for n in ("beat-a", "beat-b") for t in _sends(log(n)))
            gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(sends)]
            assert min(gaps) >= 0.9, sends
            assert sends[-1][1] == standby, sends
            print(  # noqa: T201
                f"failover: longest change {longest:.2f} s, all changes {failover:.1f} s, "
                f"{acked_at_kill - KILL_AFTER} acknowledged after the freeze; "
                f"beat takeover {takeover:.1f} s (lock timeout {LOCK_TIMEOUT} s)"
            )
        finally:
            writer_proc = procs.pop("writer", None)
            if writer_proc is not None and writer_proc.poll() is None:
                writer_proc.kill()
                writer_proc.wait(timeout=5)
            for proc in procs.values():
                celery_stop(proc)


def test_a_worker_running_a_task_through_a_failover_stays_up(tmp_path, sentinel_settings):
    """A task runs while the primary dies: its acknowledgement goes to the lost connection. Kombu
    used to raise AttributeError there, which ended the worker ("Unrecoverable error"); now the
    acknowledgement fails like any on a lost connection and the worker takes the next task."""
    from celery import Celery

    log = tmp_path / "worker.log"
    with redis_sentinel_set(tmp_path / "redis") as rset:
        config = redis_config_from_env(rset.env(), default_url="", default_broker_url="")
        worker = _worker(log, rset.env())
        try:
            assert wait_until(lambda: " ready." in log.read_text(), 40), log.read_text()[-2000:]
            sender = Celery(
                broker=config.celery_broker_url(),
                broker_transport=config.celery_broker_transport(),
                broker_transport_options=config.celery_transport_options(),
            )
            policy = config.celery_publish_retry_policy()
            sender.send_task("tests.ha.hold", args=[0.3], retry_policy=policy)
            assert wait_until(lambda: "tests.ha.hold" in log.read_text(), 10)
            rset.kill_primary()
            sender.send_task("tests.ha.record", args=[1], retry_policy=policy)
            sentinel_settings(rset.env())
            ran = wait_until(lambda: redis_client().sismember(DONE_KEY, 1), 30)
            text = log.read_text()
            assert worker.poll() is None, _worker_story(text)
            assert ran, _worker_story(text)
            assert "Unrecoverable error" not in text
        finally:
            celery_stop(worker)


def _worker_story(text: str) -> str:
    """The worker's connection events and errors (its log's tail is mostly received tasks)."""
    words = ("consumer:", "Connected", "rror", "Traceback", "Restarting", "Trying")
    lines = [line for line in text.splitlines() if any(w in line for w in words)]
    return "\n".join(lines)[-6000:]


def _sends(text: str) -> list[datetime]:
    """When beat logged each heartbeat it sent."""
    return [
        datetime.fromisoformat(line.split(" ", 1)[0])
        for line in text.splitlines()
        if SENT in line and line[:4].isdigit()
    ]


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


def test_a_connection_that_fails_over_still_waits_for_a_replica(monkeypatch):
    """Kombu's failover builds the next URL's transport from its scheme: the portal's transport
    (publishes wait for a replica) must survive the switch to the second sentinel."""
    import kombu.transport
    from kombu import Connection

    from apps.infra.broker import TRANSPORT, ReplicatedSentinelTransport, keep_on_failover

    config = redis_config_from_env(
        {"REDIS_SENTINELS": "127.0.0.1:1,127.0.0.1:2", "REDIS_SENTINEL_MASTER": "portal"},
        default_url="",
        default_broker_url="",
    )
    assert config.celery_broker_transport() == TRANSPORT
    aliases = kombu.transport.TRANSPORT_ALIASES
    monkeypatch.setitem(aliases, "sentinel", aliases["sentinel"])  # restored afterwards
    monkeypatch.setattr(kombu.transport, "_transport_cache", {"sentinel": object})  # a stale one
    keep_on_failover(config.celery_broker_transport())  # as apps.infra.celery does once configured
    conn = Connection(config.celery_broker_url(), transport=TRANSPORT)
    assert conn.transport_cls == TRANSPORT
    conn.switch(conn.alt[1])
    assert (conn.hostname, conn.port) == ("127.0.0.1", 2)
    assert isinstance(conn.transport, ReplicatedSentinelTransport)


def _check_with(**env: str) -> subprocess.CompletedProcess:
    """`manage.py check` with production settings and these Redis variables."""
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env_without(
            "REDIS_URL", "CELERY_BROKER_URL", DJANGO_SETTINGS_MODULE="portal.settings", **env
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_broken_setting_stops_the_portal_with_its_name():
    result = _check_with(REDIS_SENTINELS="10.0.0.1:26379")
    assert result.returncode != 0
    assert "Configuration error: REDIS_SENTINEL_MASTER must name" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_wait_longer_than_half_the_beat_lock_is_refused():
    result = _check_with(
        REDIS_SENTINELS="10.0.0.1:26379",
        REDIS_SENTINEL_MASTER="portal",
        REDIS_WAIT_TIMEOUT_MS="2000",
        PORTAL_BEAT_LOCK_TIMEOUT="3",
    )
    assert result.returncode != 0
    message = "REDIS_WAIT_TIMEOUT_MS must be at most half of PORTAL_BEAT_LOCK_TIMEOUT (1500 ms)"
    assert message in result.stderr


def test_one_server_reports_a_dead_redis_at_once(sentinel_settings, tmp_path):
    """Without Sentinel there is no failover to wait for: no retries, an error within a second."""
    sentinel_settings({"REDIS_URL": f"unix://{tmp_path}/none.sock?db=0"})
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        redis_client().ping()
    assert time.monotonic() - started < 1


def test_wait_settings_are_read_and_named():
    base = {"REDIS_SENTINELS": "10.0.0.1:26379", "REDIS_SENTINEL_MASTER": "portal"}
    config = redis_config_from_env(base, default_url="", default_broker_url="")
    assert (config.wait_replicas, config.wait_timeout_ms) == (1, 500)  # the default with Sentinel
    assert config.celery_broker_transport() == "apps.infra.broker:ReplicatedSentinelTransport"
    assert config.celery_transport_options()["wait_replicas"] == 1
    off = redis_config_from_env(
        dict(base, REDIS_WAIT_REPLICAS="0"), default_url="", default_broker_url=""
    )
    assert off.celery_broker_transport() == "apps.infra.broker:ReplicatedSentinelTransport"
    assert off.celery_transport_options()["wait_replicas"] == 0  # publishes do not wait
    one = redis_config_from_env({"REDIS_URL": "redis://x/0"}, default_url="", default_broker_url="")
    assert one.celery_broker_transport() is None
    for name, value in (("REDIS_WAIT_REPLICAS", "-1"), ("REDIS_WAIT_TIMEOUT_MS", "5")):
        with pytest.raises(RedisConfigError, match=f"{name}={value!r} is not a whole number"):
            redis_config_from_env(
                dict(base, **{name: value}), default_url="", default_broker_url=""
            )


def test_a_write_waits_for_a_replica_and_goes_on_without_one(tmp_path):
    """WAIT on a real primary with a replica counts it; without one it gives up after its
    time-out, and the next writes do not wait again (a dead replica costs one time-out)."""
    with redis_sentinel_set(tmp_path / "redis") as rset:
        waiter = ReplicaWait(1, 300)
        primary = redis.Redis(port=rset.primary_port, socket_timeout=5)
        with primary.pipeline(transaction=False) as pipe:
            pipe.set("k", "v")
            assert waiter.add(pipe)
            replies = pipe.execute()
        assert replies == [True, 1]  # the replica holds the write
        waiter.check(replies[-1])
        assert waiter.active
        assert redis.Redis(port=rset.replica_port).get("k") == b"v"
        rset.procs["replica"].kill()
        rset.procs["replica"].wait(timeout=5)
        assert wait_until(lambda: primary.info("replication")["connected_slaves"] == 0, 10)
        with primary.pipeline(transaction=False) as pipe:
            pipe.set("k", "w")
            started = time.monotonic()
            assert waiter.add(pipe)
            replies = pipe.execute()
        waiter.check(int(replies[-1]))
        assert replies[-1] == 0
        assert time.monotonic() - started >= 0.3
        assert not waiter.active  # paused: the next write goes on at once
        with primary.pipeline(transaction=False) as pipe:
            pipe.set("k", "x")
            assert not waiter.add(pipe)
