"""SSH to the firewall helper (deploy/firewall/portal-fw): one connection, a few verbs.

The portal's key may run nothing but the helper (forced command); this client only ever sends
a verb from a closed list with arguments it built itself, never user input, and pins host keys.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
from django.conf import settings

VERBS = frozenset(
    {
        "apply-bundle",
        "confirm",
        "rollback",
        "version",
        "health",
        "digest",
        "dhcp-leases",
        "ha-resync",
        "traffic",
        "probe",  # deploy/probe/portal-probe on the probe host
    }
)


T = TypeVar("T")


class FirewallUnreachable(Exception):
    """No SSH session to the host (down, refused, wrong host key, time-out)."""


@dataclass(frozen=True)
class HelperReply:
    """What the helper answered: its exit status and its one JSON line."""

    exit_status: int
    data: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and bool(self.data.get("ok"))

    @property
    def message(self) -> str:
        """A one-paragraph explanation for the push log and the staff screens."""
        parts = [self.data.get("message") or "", self.data.get("detail") or "", self.stderr]
        text = "\n".join(p.strip() for p in parts if p and p.strip())
        return text or f"exit status {self.exit_status}"


class BackgroundLoop:
    """An event loop in its own thread. Sessions on it connect and talk while the calling
    thread works: a rollout's handshakes run while it reads the database, and the next host's
    bundle compiles while the current host applies. Every database access stays in the
    calling thread; only SSH runs here."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="firewall-ssh", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Cancel what still runs here (a handshake whose turn never came), then stop."""

        async def drain() -> None:
            for _round in range(10):  # a cancelled task may start another one as it ends
                await asyncio.sleep(0)
                me = asyncio.current_task()
                tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
                if not tasks:
                    return
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.submit(drain()).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    def __enter__(self) -> BackgroundLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PendingCall:
    """A helper verb on its way (`FirewallSession.call_start`): `result()` waits for it."""

    def __init__(self, verb: str, wait: Callable[[], Any]) -> None:
        self.verb, self._wait = verb, wait
        self.answered_at: float | None = None  # time.monotonic() when the answer was there

    def answered(self, *_args: object) -> None:
        self.answered_at = time.monotonic()

    def result(self) -> HelperReply:
        try:
            result = self._wait()
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise FirewallUnreachable(f"{self.verb}: {exc or exc.__class__.__name__}") from exc
        stdout = str(result.stdout or "").strip().splitlines()
        try:
            data = json.loads(stdout[-1]) if stdout else {}
        except json.JSONDecodeError:
            data = {"message": stdout[-1]}
        if self.answered_at is None:
            self.answered()
        return HelperReply(
            exit_status=result.exit_status if result.exit_status is not None else 255,
            data=data,
            stderr=str(result.stderr or "").strip(),
        )


class ConnectionPool:
    """SSH connections to the hosts kept open between rollouts of this process, on one
    `BackgroundLoop` of its own: a change reaches a host without a handshake (about 0.45 s on
    a busy worker, where the handshake competes with the compile for the interpreter).

    A connection is reused while it is open; asyncssh's keepalive (every 15 s, 3 unanswered)
    closes one whose host went away, and a verb whose channel cannot be opened on a reused
    connection is sent again on a new one (the command had not started). After a fork the
    child starts its own pool. Only rollouts use it (`pooled_session_for`); the occasional
    reads of the health beat and the staff screens connect each time."""

    KEEPALIVE = {"keepalive_interval": 15, "keepalive_count_max": 3}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._background: BackgroundLoop | None = None
        # Only touched on the loop's thread: a connection, or the task still opening it.
        self._conns: dict[tuple[Any, ...], asyncio.Future[asyncssh.SSHClientConnection]] = {}
        self.handshakes = 0  # connections opened (tests and the rollout's log read it)

    def loop(self) -> BackgroundLoop:
        with self._lock:
            if self._background is None or self._pid != os.getpid():
                self._background = BackgroundLoop()
                self._pid = os.getpid()
                self._conns = {}
            return self._background

    async def get(
        self,
        key: tuple[Any, ...],
        connect: Callable[[], Coroutine[Any, Any, asyncssh.SSHClientConnection]],
    ) -> tuple[asyncssh.SSHClientConnection, bool]:
        """The open connection for `key` (and True), or a new one (and False)."""
        future = self._conns.get(key)
        if future is not None:
            try:
                conn = await asyncio.shield(future)
            except (OSError, asyncssh.Error, TimeoutError, asyncio.CancelledError):
                conn = None
            if conn is not None and not conn.is_closed():
                return conn, True
            if self._conns.get(key) is future:
                del self._conns[key]
        future = asyncio.ensure_future(connect())
        self._conns[key] = future
        self.handshakes += 1
        try:
            return await asyncio.shield(future), False
        except BaseException:
            if self._conns.get(key) is future:
                del self._conns[key]
            raise

    def forget(self, key: tuple[Any, ...], conn: asyncssh.SSHClientConnection) -> None:
        """Drop `conn` (broken) from the pool; called on the loop's thread."""
        future = self._conns.get(key)
        if (
            future is not None
            and future.done()
            and not future.cancelled()
            and future.exception() is None
            and future.result() is conn
        ):
            del self._conns[key]
        conn.abort()

    def close(self) -> None:
        """Close every connection and the loop (tests; a worker simply exits)."""
        with self._lock:
            background, conns = self._background, self._conns
            self._background, self._conns = None, {}
        if background is None or self._pid != os.getpid():
            return

        async def close_all() -> None:
            for future in conns.values():
                if future.done() and not future.cancelled() and future.exception() is None:
                    await _closed(future.result())

        with contextlib.suppress(Exception):
            background.submit(close_all()).result(timeout=10)
        background.close()


POOL = ConnectionPool()


class FirewallSession:
    """A synchronous facade over one asyncssh connection (used from Celery tasks).

    Sessions may share an event loop: one that was `start()`ed connects while another one's
    calls run, so a rollout connects to its next hosts while it pushes to the first. On a
    `BackgroundLoop` they also progress while the calling thread computes."""

    def __init__(
        self,
        *,
        address: str,
        port: int,
        user: str,
        connect_timeout: float = 5,
        loop: asyncio.AbstractEventLoop | BackgroundLoop | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.address, self.port, self.user = address, port, user
        self.connect_timeout = connect_timeout
        self._pool = pool
        self.reused = False  # the connection came open from the pool
        if pool is not None:
            loop = pool.loop()
        self._own_loop = loop is None
        self._background = loop if isinstance(loop, BackgroundLoop) else None
        if self._background is not None:
            self._loop = self._background.loop
        else:
            self._loop = loop if loop is not None else asyncio.new_event_loop()
        self._connecting: Any = None  # an asyncio.Task, or a concurrent Future on a background loop
        self._conn: asyncssh.SSHClientConnection | None = None
        self._closed = False

    def _start(self, coro: Coroutine[Any, Any, T]) -> Callable[[], T]:
        """Begin `coro` on this session's loop; returns how to wait for its result."""
        if self._background is not None:
            future = self._background.submit(coro)
            return future.result
        return functools.partial(self._loop.run_until_complete, coro)

    def start(self) -> FirewallSession:
        """Begin connecting without waiting: the handshake runs whenever the loop does."""
        self._connect_task()
        return self

    def _connect_task(self) -> Any:
        if self._connecting is None:
            if self._background is not None:
                self._connecting = self._background.submit(self._open())
            else:
                self._connecting = self._loop.create_task(self._open())
        return self._connecting

    def _connected(self) -> asyncssh.SSHClientConnection:
        task = self._connect_task()
        if self._background is not None:
            return task.result()
        return self._loop.run_until_complete(task)

    def _pool_key(self) -> tuple[Any, ...]:
        return (
            self.address,
            self.port,
            self.user,
            str(settings.PORTAL_FIREWALL_SSH_KEY),
            str(settings.PORTAL_FIREWALL_KNOWN_HOSTS),
        )

    async def _open(self) -> asyncssh.SSHClientConnection:
        """The connection: from the pool, or a handshake (created only when the task first
        runs: a session closed before its turn leaves no coroutine behind)."""
        if self._pool is not None:
            conn, self.reused = await self._pool.get(self._pool_key(), self._handshake)
            return conn
        return await self._handshake()

    async def _handshake(self) -> asyncssh.SSHClientConnection:
        key = Path(settings.PORTAL_FIREWALL_SSH_KEY)
        known_hosts = Path(settings.PORTAL_FIREWALL_KNOWN_HOSTS)
        options = ConnectionPool.KEEPALIVE if self._pool is not None else {}
        return await asyncio.wait_for(
            asyncssh.connect(
                self.address,
                port=self.port,
                username=self.user,
                client_keys=[str(key)],
                known_hosts=str(known_hosts),
                agent_path=None,
                config=None,
                **options,
            ),
            self.connect_timeout,
        )

    def __enter__(self) -> FirewallSession:
        try:
            self._conn = self._connected()
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            self.close()
            reason = str(exc) or exc.__class__.__name__
            raise FirewallUnreachable(f"{self.address}:{self.port}: {reason}") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (or stop connecting); closes the loop if it is this session's."""
        if self._closed:
            return
        self._closed = True
        task, conn = self._connecting, self._conn
        if conn is None and task is not None:
            if not task.done():
                task.cancel()
            with contextlib.suppress(
                asyncio.CancelledError,
                concurrent.futures.CancelledError,
                OSError,
                asyncssh.Error,
                TimeoutError,
            ):
                conn = self._connected()
        if conn is not None and self._pool is None:
            self._start(_closed(conn))()
        self._conn = None
        if self._own_loop:
            self._loop.close()

    def call_start(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> PendingCall:
        """Send one helper verb; its answer is read by `result()` (on a background loop the
        calling thread may work meanwhile; else the verb runs when `result()` is called)."""
        if verb not in VERBS:
            raise ValueError(f"not a helper verb: {verb}")
        if self._conn is None:
            raise RuntimeError("use FirewallSession as a context manager")
        command = shlex.join([verb, *args])
        coro = asyncio.wait_for(self._run(command, stdin), timeout)
        if self._background is not None:
            future = self._background.submit(coro)
            pending = PendingCall(verb, future.result)
            future.add_done_callback(pending.answered)
            return pending
        return PendingCall(verb, functools.partial(self._loop.run_until_complete, coro))

    async def _run(self, command: str, stdin: str | None) -> asyncssh.SSHCompletedProcess:
        if self._conn is None:
            raise RuntimeError("use FirewallSession as a context manager")
        if not self.reused or self._pool is None:
            process = await self._conn.create_process(command, input=stdin)
            return await process.wait(check=False)
        try:
            # A live connection opens a channel within a round trip; one to a host that
            # vanished without a word would wait for the keepalive (45 s).
            process = await asyncio.wait_for(
                self._conn.create_process(command, input=stdin), self.connect_timeout
            )
        except (OSError, asyncssh.Error, TimeoutError):
            # The pooled connection was dead (host restarted, link lost) and no channel
            # opened, so the command never started: send it on a new connection.
            self._pool.forget(self._pool_key(), self._conn)
            self._conn, self.reused = await self._pool.get(self._pool_key(), self._handshake)
            process = await self._conn.create_process(command, input=stdin)
        return await process.wait(check=False)

    def call(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> HelperReply:
        """Run one helper verb; a lost connection raises FirewallUnreachable."""
        return self.call_start(verb, *args, stdin=stdin, timeout=timeout).result()


async def _closed(conn: asyncssh.SSHClientConnection) -> None:
    conn.close()
    await conn.wait_closed()


def session_for(
    host: Any, *, loop: asyncio.AbstractEventLoop | BackgroundLoop | None = None
) -> FirewallSession:
    """A session to a FirewallHost row (on `loop`, shared with other sessions, if given)."""
    return FirewallSession(address=host.address, port=host.port, user=host.ssh_user, loop=loop)


def pooled_session_for(host: Any, pool: ConnectionPool = POOL) -> FirewallSession:
    """A session to a FirewallHost row on this process's open connections (`ConnectionPool`)."""
    return FirewallSession(address=host.address, port=host.port, user=host.ssh_user, pool=pool)
