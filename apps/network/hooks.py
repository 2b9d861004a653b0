"""The one hook for "network state changed": services schedule it, the compile task hangs off it.

Services call `network_changed_on_commit(cause=..., actor=...)` inside their transaction. The hook
`network_changed` then runs once after the outermost transaction commits, however many services
and causes took part, and never when it rolls back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
from django.db import transaction

from apps.network.extensions import network_extensions

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


def network_changed(*, cause: str, actor: User | None) -> None:
    """A committed change of network state: every site compiles and pushes (debounced; the
    firewall app's part, apps/network/extensions.py)."""
    name = actor.get_username() if getattr(actor, "is_authenticated", False) else "system"
    logger.info("network changed: %s (by %s)", cause, name)
    try:
        for extension in network_extensions():
            extension.network_changed(cause=f"{cause} (by {name})")
    except redis.RedisError as exc:
        # The change is committed; the next change or the health beat's drift check carries it.
        logger.warning("network change not recorded in Redis: %s", exc)


class _PendingChange:
    """The on_commit callback of one transaction; later causes join it instead of adding more."""

    def __init__(self, cause: str, actor: User | None) -> None:
        self.causes = [cause]
        self.actor = actor
        self.done = False

    def __call__(self) -> None:
        self.done = True
        network_changed(cause=", ".join(dict.fromkeys(self.causes)), actor=self.actor)


def network_changed_on_commit(*, cause: str, actor: User | None) -> None:
    """Schedule `network_changed` for when the current transaction commits (once per commit)."""
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        for _savepoints, func, _robust in connection.run_on_commit:
            if isinstance(func, _PendingChange) and not func.done:
                func.causes.append(cause)
                return
    transaction.on_commit(_PendingChange(cause, actor))
