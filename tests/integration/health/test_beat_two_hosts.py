"""Beat on two hosts, one active (celery-redbeat's lock in Redis): two real beat processes with
the portal's schedule (the heartbeat every second) on a Redis of the test's own. Only one sends;
after a SIGKILL of the active one the other takes over within the lock timeout, and no interval
is sent twice."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis

from tests.celery_proc import beat_start, celery_stop, wait_until
from tests.ha import proc_stop

LOCK_TIMEOUT = 3  # seconds; beat then ticks every second
HEARTBEAT = "workers.health.heartbeat"


@dataclass(frozen=True)
class Sent:
    """One heartbeat task beat sent: by which beat process, and when."""

    pid: int
    at: datetime


def _sent(raw: bytes) -> Sent | None:
    message = json.loads(raw)
    headers = message["headers"]
    if headers.get("task") != HEARTBEAT:
        return None
    # origin is "gen<pid>@<host>"; the heartbeat expires one interval after it was sent.
    pid = int(headers["origin"].split("@")[0].removeprefix("gen"))
    at = datetime.fromisoformat(headers["expires"]) - timedelta(seconds=1)
    return Sent(pid=pid, at=at)


class Queue:
    """Takes every message off the default queue as it arrives and keeps the heartbeats."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.sent: list[Sent] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while not self.stop.wait(0.05):
            while raw := self.client.rpop("celery"):
                if (sent := _sent(raw)) is not None:
                    self.sent.append(sent)

    def by(self, pid: int) -> list[Sent]:
        return [s for s in self.sent if s.pid == pid]

    def since(self, moment: datetime) -> list[Sent]:
        return [s for s in self.sent if s.at >= moment]


def _beat(name: str, tmp_path, env) -> subprocess.Popen:
    return beat_start(name, tmp_path, env, unset=("REDIS_SENTINELS", "REDIS_SENTINEL_MASTER"))


def test_two_beats_one_sends_and_the_other_takes_over_after_a_kill(tmp_path):
    sock = tmp_path / "redis.sock"
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(unix_socket_path=str(sock))
    env = {
        "REDIS_URL": f"unix://{sock}?db=0",
        "CELERY_BROKER_URL": f"redis+socket://{sock}",
        "PORTAL_HEARTBEAT_INTERVAL": "1",
        "PORTAL_BEAT_LOCK_TIMEOUT": str(LOCK_TIMEOUT),
    }
    beats: dict[str, subprocess.Popen] = {}
    queue = None
    try:
        assert wait_until(lambda: sock.exists() and _ping(client), 10)
        queue = Queue(client)
        logs = lambda: {n: (tmp_path / f"{n}.log").read_text()[-1500:] for n in beats}  # noqa: E731
        beats["a"] = _beat("a", tmp_path, env)
        assert wait_until(lambda: len(queue.by(beats["a"].pid)) >= 2, 30), logs()
        beats["b"] = _beat("b", tmp_path, env)
        # B is up and waiting for the lock; for several intervals only A sends.
        assert wait_until(lambda: "beat: Starting" in logs()["b"], 30), logs()
        both_from = datetime.now(tz=UTC)
        time.sleep(4)
        assert len(queue.since(both_from)) >= 3
        assert {s.pid for s in queue.since(both_from)} == {beats["a"].pid}, logs()
        assert queue.by(beats["b"].pid) == []

        os.killpg(beats["a"].pid, signal.SIGKILL)
        beats["a"].wait(timeout=5)
        killed = time.monotonic()
        took_over = wait_until(lambda: queue.by(beats["b"].pid), LOCK_TIMEOUT + 10)
        takeover = time.monotonic() - killed
        assert took_over, logs()
        # The lock expires LOCK_TIMEOUT after A's last renewal; B looks once per tick (1 s);
        # the rest is slack for a loaded machine.
        assert takeover <= LOCK_TIMEOUT + 4, takeover
        assert wait_until(lambda: len(queue.by(beats["b"].pid)) >= 3, 10), logs()

        # Never two heartbeats for one interval: consecutive sends at least ~1 s apart.
        times = sorted(s.at for s in queue.sent)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 0.9, gaps
        print(f"beat takeover after SIGKILL: {takeover:.1f} s (lock timeout {LOCK_TIMEOUT} s)")  # noqa: T201
    finally:
        for proc in beats.values():
            celery_stop(proc)
        if queue:
            queue.stop.set()
            queue.thread.join(timeout=2)
        proc_stop(server)


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
