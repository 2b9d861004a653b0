"""Real redundant services for the scale-out tests: Redis with a replica and three sentinels,
a PostgreSQL primary with a hot standby. Everything on loopback ports chosen at run time, under a
tmp dir, and stopped by the context managers however the test ends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
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


def proc_stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """Stop a process (`sig`, then KILL after 10 s)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class Relay:
    """A TCP relay on loopback between the replica and the primary: the replication link.
    `freeze()` drops what the primary sends from then on, as a congested link would hold it:
    the replica stops receiving writes the primary has already acknowledged (on loopback the
    replica is otherwise microseconds behind, and a failover would hardly ever lose anything)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = threading.Event()
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                down.close()  # the primary is gone: the replica tries again
                continue
            up.settimeout(None)
            self.sockets += [down, up]
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_primary: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not (from_primary and self.frozen.is_set()):
                    dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        for sock in (self.listener, *self.sockets):
            with contextlib.suppress(OSError):
                sock.close()


@dataclass
class RedisSet:
    """A primary, a replica (linked through a `Relay`) and three sentinels (quorum 2) that
    fail over after 1 s."""

    root: Path
    primary_port: int = 0
    replica_port: int = 0
    sentinel_ports: list[int] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    relay: Relay | None = None

    def _server(self, name: str, *args: str) -> subprocess.Popen[Any]:
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            ["redis-server", *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        self.primary_port, self.replica_port = free_port(), free_port()
        # No wait before a full sync: Redis 7 waits repl-diskless-sync-delay (5 s) for more
        # replicas to arrive so that one transfer serves them all; this set has one replica.
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--repl-diskless-sync-delay", "0"]  # fmt: skip
        self._server("primary", "--port", str(self.primary_port), *common)
        self.relay = Relay(self.primary_port)
        self._server(
            "replica",
            "--port",
            str(self.replica_port),
            *common,
            "--replicaof",
            "127.0.0.1",
            str(self.relay.port),
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
                # Long: the sentinels leave the replica on the relay (they "fix" a replica
                # whose master port is not the primary's after twice this without trouble).
                f"sentinel failover-timeout {MASTER} 60000\n"
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

    def freeze_replication(self) -> None:
        """From now on the replica receives nothing from the primary (see `Relay`)."""
        assert self.relay is not None
        self.relay.freeze()

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
            proc_stop(proc, signal.SIGKILL)
        if self.relay is not None:
            self.relay.close()


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


# --- PostgreSQL primary + hot standby -------------------------------------------------------------

PGBIN = Path(
    sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )[-1]
    if Path("/usr/lib/postgresql").exists()
    else "/usr/bin"
)
AS_ROOT = os.geteuid() == 0


def pg(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL program; as root, as the 'postgres' user (PostgreSQL refuses root)."""
    cmd = [str(PGBIN / args[0]), *args[1:]]
    if AS_ROOT:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(args)}: {result.stdout}{result.stderr}"
    return result


@dataclass
class PgPair:
    """A primary and a hot standby made with `pg_basebackup -R`, on loopback ports; commits wait
    for the standby (synchronous replication), so a crash of the primary loses no commit."""

    root: Path
    primary_port: int = 0
    standby_port: int = 0

    @property
    def primary(self) -> Path:
        return self.root / "primary"

    @property
    def standby(self) -> Path:
        return self.root / "standby"

    def url(self, name: str = "portal") -> str:
        """The multi-host DATABASE_URL the portal uses: primary first, then the standby."""
        return f"postgresql://portal@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}/{name}"

    def client(self, program: str, *args: str, port: int = 0) -> subprocess.CompletedProcess[str]:
        """A client program as the portal user, on the primary unless `port`."""
        where = ("-h", "127.0.0.1", "-p", str(port or self.primary_port), "-U", "portal")
        return pg(program, *where, *args)

    def psql(self, port: int, sql: str, db: str = "portal") -> str:
        return self.client("psql", "-d", db, "-tAc", sql, port=port).stdout.strip()

    def start(self, *, load_from: dict[str, str]) -> None:
        """Start the primary, load the database `load_from` names (host, port, name) into it,
        clone the standby and switch on synchronous replication to it."""
        self.primary_port, self.standby_port = free_port(), free_port()
        pg(
            "initdb",
            "-D",
            str(self.primary),
            "-U",
            "portal",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        with (self.primary / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.primary_port}\n"
                f"unix_socket_directories = '{self.root}'\nfsync = off\nfull_page_writes = off\n"
                "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
            )
        pg("pg_ctl", "-D", str(self.primary), "-l", str(self.root / "primary.log"), "-w", "start")
        self.client("createdb", "portal")
        dump = self.root / "load.dump"
        pg(
            "pg_dump",
            "-h",
            load_from["host"],
            "-p",
            load_from["port"],
            "-U",
            "portal",
            "-Fc",
            "-f",
            str(dump),
            load_from["name"],
        )
        self.client("pg_restore", "--no-owner", "-d", "portal", str(dump))
        self.client(
            "pg_basebackup",
            "-D",
            str(self.standby),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        with (self.standby / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.standby_port}\n")
        pg("pg_ctl", "-D", str(self.standby), "-l", str(self.root / "standby.log"), "-w", "start")
        streaming = wait_until(
            lambda: (
                self.psql(
                    self.primary_port,
                    "SELECT count(*) FROM pg_stat_replication WHERE state='streaming'",
                )
                == "1"
            ),
            20,
            0.2,
        )
        assert streaming, self.logs()
        self.psql(self.primary_port, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.psql(self.primary_port, "SELECT pg_reload_conf()")
        sync = wait_until(
            lambda: (
                self.psql(self.primary_port, "SELECT sync_state FROM pg_stat_replication") == "sync"
            ),
            20,
            0.2,
        )
        assert sync, self.logs()

    def crash_primary(self) -> None:
        """Stop the primary as a crash would (immediate: no shutdown checkpoint, no goodbye)."""
        pg("pg_ctl", "-D", str(self.primary), "-m", "immediate", "-w", "stop")

    def promote_standby(self) -> None:
        pg("pg_ctl", "-D", str(self.standby), "-w", "promote")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        for data in (self.standby, self.primary):
            if (data / "postmaster.pid").exists():
                with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                    pg("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", timeout=30)


@contextlib.contextmanager
def pg_pair(*, load_from: dict[str, str]) -> Iterator[PgPair]:
    """A running PgPair in a fresh directory under /tmp (the postgres user must reach it),
    stopped and removed on the way out."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="portal-pg-ha-"))
    if AS_ROOT:
        shutil.chown(root, "postgres", "postgres")
    pair = PgPair(root=root)
    try:
        pair.start(load_from=load_from)
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
