"""Real redundant services for the scale-out tests: Redis with a replica and three sentinels,
a PostgreSQL primary with a hot standby. Everything on loopback ports chosen at run time, under a
tmp dir, and stopped by the context managers however the test ends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.celery_proc import wait_until

MASTER = "portal-ha"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass
class RedisSet:
    """A primary, a replica and three sentinels (quorum 2) that fail over after 1 s."""

    root: Path
    primary_port: int = 0
    replica_port: int = 0
    sentinel_ports: list[int] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)

    def _server(self, name: str, *args: str) -> subprocess.Popen[Any]:
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            ["redis-server", *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        self.primary_port, self.replica_port = free_port(), free_port()
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._server("primary", "--port", str(self.primary_port), *common)
        self._server(
            "replica",
            "--port",
            str(self.replica_port),
            *common,
            "--replicaof",
            "127.0.0.1",
            str(self.primary_port),
        )
        replica = redis.Redis(port=self.replica_port, socket_timeout=1)
        synced = wait_until(lambda: _info(replica, "master_link_status") == "up", 15, 0.1)
        assert synced, self.logs()
        for n in range(3):
            port = free_port()
            conf = self.root / f"sentinel{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 10000\n"
            )
            self.sentinel_ports.append(port)
            self._server(f"sentinel{n}", str(conf), "--sentinel")
        # Each sentinel knows the replica and its peers before the test may fail anything.
        for port in self.sentinel_ports:
            sentinel = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
            ready = wait_until(lambda s=sentinel: _sentinel_ready(s), 20, 0.2)
            assert ready, self.logs()

    def env(self) -> dict[str, str]:
        """The portal's settings for this set."""
        return {
            "REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
            "REDIS_SENTINEL_MASTER": MASTER,
        }

    def current_primary_port(self) -> int:
        sentinel = redis.Redis(port=self.sentinel_ports[0], socket_timeout=1)
        _host, port = sentinel.sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def kill_primary(self) -> None:
        """SIGKILL, as a crash: no goodbye to the replica or the clients."""
        self.procs["primary"].send_signal(signal.SIGKILL)
        self.procs["primary"].wait(timeout=5)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            _stop(proc, signal.SIGKILL)


def _info(client: redis.Redis, key: str) -> str:
    try:
        return str(client.info("replication").get(key, ""))
    except redis.RedisError:
        return ""


def _sentinel_ready(sentinel: redis.Redis) -> bool:
    try:
        master = sentinel.sentinel_master(MASTER)
    except redis.RedisError:
        return False
    return int(master.get("num-slaves", 0)) >= 1 and int(master.get("num-other-sentinels", 0)) >= 2


@contextlib.contextmanager
def redis_sentinel_set(root: Path) -> Iterator[RedisSet]:
    """A running RedisSet under `root`, killed on the way out."""
    root.mkdir(parents=True, exist_ok=True)
    rset = RedisSet(root=root)
    try:
        rset.start()
        yield rset
    finally:
        rset.stop()


def env_without(*names: str, **extra: str) -> dict[str, str]:
    """This process's environment without `names`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(extra)
    return env


def elapsed_since(start: float) -> float:
    return round(time.monotonic() - start, 2)
