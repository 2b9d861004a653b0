"""SSH to the firewall helper (deploy/firewall/portal-fw): one connection, a few verbs.

The portal's key may run nothing but the helper (forced command); this client only ever sends
a verb from a closed list with arguments it built itself, never user input, and pins host keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class FirewallSession:
    """A synchronous facade over one asyncssh connection (used from Celery tasks).

    Sessions may share an event loop: one that was `start()`ed connects while another one's
    calls run, so a rollout connects to its next hosts while it pushes to the first."""

    def __init__(
        self,
        *,
        address: str,
        port: int,
        user: str,
        connect_timeout: float = 5,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.address, self.port, self.user = address, port, user
        self.connect_timeout = connect_timeout
        self._own_loop = loop is None
        self._loop = loop if loop is not None else asyncio.new_event_loop()
        self._connecting: asyncio.Task[asyncssh.SSHClientConnection] | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._closed = False

    def start(self) -> FirewallSession:
        """Begin connecting without waiting: the handshake runs whenever the loop does."""
        self._connect_task()
        return self

    def _connect_task(self) -> asyncio.Task[asyncssh.SSHClientConnection]:
        if self._connecting is None:
            self._connecting = self._loop.create_task(self._open())
        return self._connecting

    async def _open(self) -> asyncssh.SSHClientConnection:
        """The handshake (created only when the task first runs: a session closed before its
        turn leaves no coroutine behind)."""
        key = Path(settings.PORTAL_FIREWALL_SSH_KEY)
        known_hosts = Path(settings.PORTAL_FIREWALL_KNOWN_HOSTS)
        return await asyncio.wait_for(
            asyncssh.connect(
                self.address,
                port=self.port,
                username=self.user,
                client_keys=[str(key)],
                known_hosts=str(known_hosts),
                agent_path=None,
                config=None,
            ),
            self.connect_timeout,
        )

    def __enter__(self) -> FirewallSession:
        try:
            self._conn = self._loop.run_until_complete(self._connect_task())
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
            with contextlib.suppress(asyncio.CancelledError, OSError, asyncssh.Error, TimeoutError):
                conn = self._loop.run_until_complete(task)
        if conn is not None:
            conn.close()
            self._loop.run_until_complete(conn.wait_closed())
        self._conn = None
        if self._own_loop:
            self._loop.close()

    def call(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> HelperReply:
        """Run one helper verb; a lost connection raises FirewallUnreachable."""
        if verb not in VERBS:
            raise ValueError(f"not a helper verb: {verb}")
        if self._conn is None:
            raise RuntimeError("use FirewallSession as a context manager")
        command = shlex.join([verb, *args])
        try:
            result = self._loop.run_until_complete(
                asyncio.wait_for(self._conn.run(command, input=stdin, check=False), timeout)
            )
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise FirewallUnreachable(f"{verb}: {exc or exc.__class__.__name__}") from exc
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


def session_for(host: Any, *, loop: asyncio.AbstractEventLoop | None = None) -> FirewallSession:
    """A session to a FirewallHost row (on `loop`, shared with other sessions, if given)."""
    return FirewallSession(address=host.address, port=host.port, user=host.ssh_user, loop=loop)
