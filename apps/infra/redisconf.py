"""Where Redis is: one URL, or a set of Sentinels that name the current primary.

Every user of Redis (the cache, the firewall site locks, live state and rate limits through
`apps.infra.redis`, the Celery broker, beat's schedule and lock in celery-redbeat) is configured from the one `RedisConfig` this
module reads from the environment, so a failover moves all of them to the new primary at once.

- One server: `REDIS_URL` (cache, locks) and `CELERY_BROKER_URL` (the broker), as before.
- Sentinel: `REDIS_SENTINELS=host:port,host:port,...` (IPv6 as `[addr]:port`) and
  `REDIS_SENTINEL_MASTER=<the name the sentinels monitor>`; optional `REDIS_PASSWORD` (the
  primary's and replicas' `requirepass`), `REDIS_SENTINEL_PASSWORD` (the sentinels' own) and
  `REDIS_DB` (0). REDIS_URL and CELERY_BROKER_URL must then be unset: the sentinels decide.
- Writes that must survive a failover (a task published to the broker, a firewall site lock
  taken) wait until `REDIS_WAIT_REPLICAS` replicas hold them (Redis `WAIT`; 1 by default with
  Sentinel, 0 turns it off), at most `REDIS_WAIT_TIMEOUT_MS` (500). Redis replicates
  asynchronously: without the wait, a write the primary acknowledged in its last instant is
  missing on the replica that the sentinels promote. See docs/operations.md.

No Django here: settings.py calls it while it is being read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

__all__ = ["RedisConfig", "RedisConfigError", "redis_config_from_env"]

_HOST_PORT = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d+)$")
_MASTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

# With Sentinel, a failover takes the sentinels' down-after time plus a second or two: clients
# retry that long instead of failing the request (exponential back-off up to 1 s, about 12 s in
# all). One server has no failover to wait for: a dead Redis is reported at once.
RETRIES = 14
WAIT_TIMEOUT_MS = 500


class RedisConfigError(ValueError):
    """A Redis setting that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class RedisConfig:
    """Where the portal's Redis is (`url`, or `sentinels` + `master`) and how to log in."""

    url: str = ""
    broker_url: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    password: str = field(default="", repr=False)
    sentinel_password: str = field(default="", repr=False)
    db: int = 0
    wait_replicas: int = 0  # replicas that must hold a durable write before it counts as done
    wait_timeout_ms: int = WAIT_TIMEOUT_MS

    @property
    def uses_sentinel(self) -> bool:
        return bool(self.sentinels)

    def describe(self) -> str:
        """For messages and logs: where Redis is, without passwords."""
        if not self.uses_sentinel:
            return self.url
        hosts = ",".join(_join(h, p) for h, p in self.sentinels)
        return f"sentinel://{hosts}/{self.master}?db={self.db}"

    def celery_broker_url(self) -> str:
        """Kombu's form: one `sentinel://` URL per sentinel, joined with ';'."""
        if not self.uses_sentinel:
            return self.broker_url
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return ";".join(f"sentinel://{auth}{_join(h, p)}/{self.db}" for h, p in self.sentinels)

    def celery_transport_options(self) -> dict[str, Any]:
        """Options the sentinel transport needs beside the URL (none for one server)."""
        if not self.uses_sentinel:
            return {}
        options: dict[str, Any] = {"master_name": self.master}
        kwargs: dict[str, Any] = {"socket_timeout": 2, "socket_connect_timeout": 2}
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        options["sentinel_kwargs"] = kwargs
        # apps.infra.broker's channel: with wait_replicas, each publish waits for the replicas (WAIT).
        options["wait_replicas"] = self.wait_replicas
        options["wait_timeout_ms"] = self.wait_timeout_ms
        return options

    def celery_broker_transport(self) -> str | None:
        """Kombu's transport: with Sentinel, the portal's own (a publish returns once
        `wait_replicas` replicas hold it; a connection lost in a failover fails cleanly);
        otherwise the URL's scheme decides."""
        if self.uses_sentinel:
            return "apps.infra.broker:ReplicatedSentinelTransport"  # apps.infra.broker.TRANSPORT
        return None

    def celery_publish_retry_policy(self) -> dict[str, float]:
        """Celery's default for one server; with Sentinel, long enough to span a failover."""
        if not self.uses_sentinel:
            return {
                "max_retries": 3,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 0.2,
            }
        return {"max_retries": 30, "interval_start": 0, "interval_step": 0.25, "interval_max": 0.5}

    def redbeat_url(self) -> str:
        """What celery-redbeat's banner names (the client itself is apps.infra.redis's: see
        apps.infra.celery.PortalScheduler)."""
        return "redis-sentinel://" if self.uses_sentinel else self.url

    def redbeat_options(self) -> dict[str, Any]:
        """None: PortalScheduler hands redbeat the portal's own client, which follows the
        sentinels and retries every command and pipeline across a failover (redbeat's own
        Sentinel client retried single commands only)."""
        return {}

    def sentinel_kwargs(self) -> dict[str, Any]:
        """How redis-py talks to the sentinels themselves."""
        kwargs: dict[str, Any] = {"socket_timeout": 1, "socket_connect_timeout": 1}
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _sentinels(raw: str) -> tuple[tuple[str, int], ...]:
    found: list[tuple[str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        match = _HOST_PORT.match(item)
        port = int(match["port"]) if match else 0
        if not match or not 0 < port < 65536:
            raise RedisConfigError(
                f"REDIS_SENTINELS: {item!r} is not host:port (IPv6 as [address]:port)."
            )
        host = match["ip6"] or match["host"]
        if match["ip6"]:
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise RedisConfigError(f"REDIS_SENTINELS: {item!r}: not an IPv6 address.") from None
        found.append((host, port))
    return tuple(found)


def redis_config_from_env(
    env: Mapping[str, str], *, default_url: str, default_broker_url: str
) -> RedisConfig:
    """Read REDIS_* / CELERY_BROKER_URL; raise RedisConfigError naming what is wrong."""
    sentinels = _sentinels(env.get("REDIS_SENTINELS", ""))
    if not sentinels:
        return RedisConfig(
            url=env.get("REDIS_URL") or default_url,
            broker_url=env.get("CELERY_BROKER_URL") or default_broker_url,
        )
    both = [name for name in ("REDIS_URL", "CELERY_BROKER_URL") if env.get(name)]
    if both:
        raise RedisConfigError(
            f"REDIS_SENTINELS is set, so {' and '.join(both)} must not be: the sentinels name "
            "the Redis primary for the cache, the locks and the Celery broker alike."
        )
    master = env.get("REDIS_SENTINEL_MASTER", "").strip()
    if not _MASTER_NAME.match(master):
        raise RedisConfigError(
            "REDIS_SENTINEL_MASTER must name the primary the sentinels monitor "
            "(letters, digits, '.', '_', '-'), e.g. REDIS_SENTINEL_MASTER=portal."
        )
    raw_db = env.get("REDIS_DB", "") or "0"
    if not raw_db.isdigit() or int(raw_db) > 15:
        raise RedisConfigError(f"REDIS_DB={raw_db!r} is not a database number (0-15).")
    wait_replicas = _number(
        "REDIS_WAIT_REPLICAS", env.get("REDIS_WAIT_REPLICAS", ""), default=1, low=0, high=16
    )
    wait_timeout = _number(
        "REDIS_WAIT_TIMEOUT_MS",
        env.get("REDIS_WAIT_TIMEOUT_MS", ""),
        default=WAIT_TIMEOUT_MS,
        low=10,
        high=60000,
    )
    return RedisConfig(
        sentinels=sentinels,
        master=master,
        password=env.get("REDIS_PASSWORD", ""),
        sentinel_password=env.get("REDIS_SENTINEL_PASSWORD", ""),
        db=int(raw_db),
        wait_replicas=wait_replicas,
        wait_timeout_ms=wait_timeout,
    )


def _number(name: str, value: str, *, default: int, low: int, high: int) -> int:
    raw = value.strip() or str(default)
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise RedisConfigError(f"{name}={raw!r} is not a whole number from {low} to {high}.")
    return int(raw)
