"""SSH to the firewall hosts' agent (deploy/firewall/portal_fw): one connection, one agent.

The portal's key may run nothing but the host's forced command. On each connection this client
starts ONE agent (`agent --protocol N`) and sends it JSON-line requests (a verb from a closed
list, arguments the portal built itself, never user input); pooled connections keep their
agent open between rollouts, so a push costs no interpreter start on the host. Host keys are
pinned. The probe host's helper (verb `probe`) still answers one process per call.
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
EXEC_VERBS = frozenset({"probe"})  # one process per call (not the firewall agent)

# The protocol this portal speaks with the firewall hosts' agent (portal_fw.AGENT_PROTOCOL).
AGENT_PROTOCOL = 1
AGENT_COMMAND = f"agent --protocol {AGENT_PROTOCOL}"


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


class AgentMismatch(FirewallUnreachable):
    """The host's agent speaks another protocol (or is the helper from before the agent):
    nothing was sent; the message says which side to update."""


class AgentLost(FirewallUnreachable):
    """The agent ended (killed, connection lost) before it answered."""


class PendingCall:
    """A request on its way (`FirewallSession.call_start`): `result()` waits for it."""

    def __init__(self, verb: str, wait: Callable[[], HelperReply]) -> None:
        self.verb, self._wait = verb, wait
        self.answered_at: float | None = None  # time.monotonic() when the answer was there

    def answered(self, *_args: object) -> None:
        self.answered_at = time.monotonic()

    def result(self) -> HelperReply:
        try:
            reply = self._wait()
        except FirewallUnreachable:
            raise
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise FirewallUnreachable(f"{self.verb}: {exc or exc.__class__.__name__}") from exc
        if self.answered_at is None:
            self.answered()
        return reply


def _exec_reply(result: asyncssh.SSHCompletedProcess) -> HelperReply:
    """One process's answer: its exit status and its last stdout line (JSON)."""
    stdout = str(result.stdout or "").strip().splitlines()
    try:
        data = json.loads(stdout[-1]) if stdout else {}
    except json.JSONDecodeError:
        data = {"message": stdout[-1]}
    return HelperReply(
        exit_status=result.exit_status if result.exit_status is not None else 255,
        data=data,
        stderr=str(result.stderr or "").strip(),
    )


def agent_args(words: tuple[str, ...]) -> dict[str, Any]:
    """Command-line style arguments (``--confirm-within 30 --no-digest``) as the agent's typed
    argument object (``{"confirm_within": 30, "no_digest": true}``)."""
    args: dict[str, Any] = {}
    i = 0
    while i < len(words):
        if not words[i].startswith("--"):
            raise ValueError(f"not an option: {words[i]!r}")
        name = words[i][2:].replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            args[name] = int(value) if value.lstrip("-").isdigit() else value
            i += 2
        else:
            args[name] = True
            i += 1
    return args


class Agent:
    """The agent process on one connection: one request at a time, answers matched by id."""

    def __init__(self, conn: asyncssh.SSHClientConnection, process: Any, hello: dict) -> None:
        self.conn, self.process, self.hello = conn, process, hello
        self.lock = asyncio.Lock()
        self.next_id = 0
        self.broken = False

    @classmethod
    async def start(cls, conn: asyncssh.SSHClientConnection, timeout: float) -> Agent:
        """Start the agent and read its hello; a mismatch raises `AgentMismatch`."""
        process = await asyncio.wait_for(conn.create_process(AGENT_COMMAND), timeout)
        line = await asyncio.wait_for(process.stdout.readline(), timeout)
        try:
            hello = json.loads(line) if line.strip() else {}
        except ValueError:
            hello = {"message": line.strip()[:200]}
        if hello.get("ok") is True and hello.get("agent") == AGENT_PROTOCOL:
            return cls(conn, process, hello)
        process.close()
        if hello.get("error") == "protocol" and hello.get("message"):
            raise AgentMismatch(str(hello["message"]))
        if "agent" in hello:
            raise AgentMismatch(
                f"host runs agent {hello['agent']}, portal expects {AGENT_PROTOCOL}: update the "
                + ("host" if int(hello["agent"]) < AGENT_PROTOCOL else "portal")
            )
        said = hello.get("message") or "no answer"
        raise AgentMismatch(
            f"host runs a helper without the agent ({said}), portal expects agent "
            f"{AGENT_PROTOCOL}: update the host (deploy/firewall/README.md)"
        )

    def alive(self) -> bool:
        return not self.broken and self.process.exit_status is None and not self.conn.is_closed()

    async def request(self, verb: str, args: dict[str, Any], raw_input: str | None) -> HelperReply:
        """One request line out, its answer line in. `raw_input` is JSON text (the bundle),
        spliced into the line as it is (no second encoding of megabytes)."""
        async with self.lock:
            if not self.alive():
                raise AgentLost(f"{verb}: the agent on this connection has ended")
            self.next_id += 1
            head = json.dumps(
                {"id": self.next_id, "verb": verb, "args": args}, separators=(",", ":")
            )
            line = head if raw_input is None else f'{head[:-1]},"input":{raw_input}}}'
            try:
                self.process.stdin.write(line + "\n")
                answer = await self.process.stdout.readline()
            except BaseException:
                self.broken = True  # cancelled or lost half way: the next session starts anew
                raise
            if not answer:
                self.broken = True
                raise AgentLost(f"{verb}: the agent ended before it answered")
            data = json.loads(answer)
            if data.get("id") != self.next_id:
                self.broken = True
                raise AgentLost(f"{verb}: the agent answered another request ({data.get('id')})")
            code = 0 if data.get("ok") else int(data.get("code") or 1)
            return HelperReply(exit_status=code, data=data)

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(Exception):
            self.process.stdin.write_eof()
        self.process.close()


class ConnectionPool:
    """SSH connections to the hosts kept open between rollouts of this process, on one
    `BackgroundLoop` of its own: a change reaches a host without a handshake (about 0.45 s on
    a busy worker, where the handshake competes with the compile for the interpreter).

    A connection is reused with its agent while both are open; asyncssh's keepalive (every
    15 s, 3 unanswered) closes one whose host went away. A session on a reused connection
    first asks its agent `version` (one round trip); one that does not answer within the
    connect time-out (the host went silent) is replaced, nothing having been sent. After a
    fork the child starts its own pool. Rollouts use `POOL`, the lease rounds (every 15 s,
    apps/dhcp) `LEASE_POOL`, so a round never waits behind an apply on one agent, nor an apply
    behind a round (`pooled_session_for`); the occasional reads of the health beat and the
    staff screens connect each time."""

    KEEPALIVE = {"keepalive_interval": 15, "keepalive_count_max": 3}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._background: BackgroundLoop | None = None
        # Only touched on the loop's thread: a connection, or the task still opening it.
        self._conns: dict[tuple[Any, ...], asyncio.Future[asyncssh.SSHClientConnection]] = {}
        self.agents: dict[tuple[Any, ...], Agent] = {}  # the agent of each connection
        self.handshakes = 0  # connections opened (tests and the rollout's log read it)
        self.agents_started = 0

    def loop(self) -> BackgroundLoop:
        with self._lock:
            if self._background is None or self._pid != os.getpid():
                self._background = BackgroundLoop()
                self._pid = os.getpid()
                self._conns, self.agents = {}, {}
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
        agent = self.agents.get(key)
        if agent is not None and agent.conn is conn:
            del self.agents[key]
            agent.broken = True
        conn.abort()

    def close(self) -> None:
        """Close every connection and the loop (tests; a worker simply exits)."""
        with self._lock:
            background, conns = self._background, self._conns
            self._background, self._conns, self.agents = None, {}, {}
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
LEASE_POOL = ConnectionPool()  # the lease rounds' own connections and agents


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
        agent: bool = True,
    ) -> None:
        self.address, self.port, self.user = address, port, user
        self.uses_agent = agent  # False: the probe host (one process per call)
        self._agent: Agent | None = None
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
        """The connection and its agent: from the pool, or a handshake (created only when the
        task first runs: a session closed before its turn leaves no coroutine behind)."""
        if self._pool is not None:
            conn, self.reused = await self._pool.get(self._pool_key(), self._handshake)
            if self.uses_agent:
                conn, self._agent = await self._pooled_agent(self._pool, conn)
            return conn
        conn = await self._handshake()
        if self.uses_agent:
            try:
                self._agent = await Agent.start(conn, self.connect_timeout)
            except BaseException:
                conn.abort()
                raise
        return conn

    async def _pooled_agent(
        self, pool: ConnectionPool, conn: asyncssh.SSHClientConnection
    ) -> tuple[asyncssh.SSHClientConnection, Agent]:
        """The connection's agent: the open one if it still answers, else a new one (on a new
        connection when the old one no longer opens a channel). Nothing is sent but `version`."""
        key = self._pool_key()
        agent = pool.agents.get(key)
        if self.reused:
            try:
                if agent is not None and agent.conn is conn and agent.alive():
                    await asyncio.wait_for(agent.request("version", {}, None), self.connect_timeout)
                    return conn, agent
                agent = await Agent.start(conn, self.connect_timeout)
            except AgentMismatch:
                raise
            except (OSError, asyncssh.Error, TimeoutError, FirewallUnreachable):
                # The pooled connection was dead (host restarted, link lost): a new one.
                pool.forget(key, conn)
                conn, self.reused = await pool.get(key, self._handshake)
                agent = await Agent.start(conn, self.connect_timeout)
        else:
            agent = await Agent.start(conn, self.connect_timeout)
        pool.agents[key] = agent
        pool.agents_started += 1
        return conn, agent

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
        except FirewallUnreachable:
            self.close()
            raise
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
                FirewallUnreachable,  # an agent that refused: the connection stays pooled
            ):
                conn = self._connected()
        if conn is not None and self._pool is None:
            if self._agent is not None:
                self._agent.close()
            self._start(_closed(conn))()
        self._conn = None
        if self._own_loop:
            self._loop.close()

    def call_start(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> PendingCall:
        """Send one request; its answer is read by `result()` (on a background loop the
        calling thread may work meanwhile; else the request runs when `result()` is called).
        To the agent, `args` become its typed arguments and `stdin` (JSON) its input."""
        if verb not in VERBS:
            raise ValueError(f"not a helper verb: {verb}")
        if self._conn is None:
            raise RuntimeError("use FirewallSession as a context manager")
        coro: Coroutine[Any, Any, HelperReply]
        if verb in EXEC_VERBS or not self.uses_agent:
            coro = self._exec(shlex.join([verb, *args]), stdin)
        else:
            if self._agent is None:
                raise RuntimeError("the session has no agent")
            coro = self._agent.request(verb, agent_args(args), stdin)
        timed = asyncio.wait_for(coro, timeout)
        if self._background is not None:
            future = self._background.submit(timed)
            pending = PendingCall(verb, future.result)
            future.add_done_callback(pending.answered)
            return pending
        return PendingCall(verb, functools.partial(self._loop.run_until_complete, timed))

    async def _exec(self, command: str, stdin: str | None) -> HelperReply:
        """One process for one verb (the probe host's helper)."""
        if self._conn is None:
            raise RuntimeError("use FirewallSession as a context manager")
        process = await self._conn.create_process(command, input=stdin)
        return _exec_reply(await process.wait(check=False))

    def call(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> HelperReply:
        """Run one helper verb; a lost connection raises FirewallUnreachable."""
        return self.call_start(verb, *args, stdin=stdin, timeout=timeout).result()


async def _closed(conn: asyncssh.SSHClientConnection) -> None:
    conn.close()
    await conn.wait_closed()


def session_for(
    host: Any,
    *,
    loop: asyncio.AbstractEventLoop | BackgroundLoop | None = None,
    agent: bool = True,
) -> FirewallSession:
    """A session to a FirewallHost row (on `loop`, shared with other sessions, if given);
    `agent=False` for a host whose helper answers one process per call (the probe host)."""
    return FirewallSession(
        address=host.address, port=host.port, user=host.ssh_user, loop=loop, agent=agent
    )


def pooled_session_for(host: Any, pool: ConnectionPool = POOL) -> FirewallSession:
    """A session to a FirewallHost row on this process's open connections (`ConnectionPool`)."""
    return FirewallSession(address=host.address, port=host.port, user=host.ssh_user, pool=pool)
