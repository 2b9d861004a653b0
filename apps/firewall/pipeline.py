"""From "the network changed" to "every host of every site runs it": debounce, one run per site.

A change marks every site dirty and schedules one compile-and-rollout run per site: at once
when the site is idle, a moment later (the debounce) while a run of that site holds its lock, so
a burst of changes becomes a handful of runs per site. Sites are independent: each has
its own lock, its own causes and its own scheduled mark, so a bundle refused at one site or a
slow host there never holds another site's rollout (the firewall queue's worker runs them in
parallel threads).

A run holds its site's Redis lock. The lock has a short expiry that a thread of the holder
renews while the holder lives: a run that takes minutes keeps it, and a run that dies (even by
SIGKILL) loses it within `PORTAL_FIREWALL_LOCK_TTL` seconds. The task is delivered again
(acks_late), so the system converges. A run clears its "scheduled" mark before it reads the
database: a change after that point schedules the next run, which waits for the lock and
carries it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
import structlog
from django.conf import settings

from apps.firewall import dispatch
from apps.firewall.models import Site
from apps.infra.redis import redis_client, replicated_execute

log = structlog.get_logger(__name__)

SCHEDULED_TTL = 10  # seconds
REQUEST_TTL = 3600  # a "push now" outcome stays readable this long
LOCK_POLL = 0.05  # seconds between attempts while waiting for the lock


def lock_key(site_id: int) -> str:
    return f"portal:firewall:site:{site_id}:lock"


def scheduled_key(site_id: int) -> str:
    return f"portal:firewall:site:{site_id}:scheduled"


def causes_key(site_id: int) -> str:
    return f"portal:firewall:site:{site_id}:causes"


def requests_key(site_id: int) -> str:
    return f"portal:firewall:site:{site_id}:requests"


def request_key(request_id: str) -> str:
    return f"portal:firewall:request:{request_id}"


# Taking the lock is idempotent: a retry after a failover (the first attempt's reply was lost
# with the primary, the key reached the replica) finds its own token and keeps the lock.
_ACQUIRE = """
local held = redis.call('get', KEYS[1])
if held == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if held then return 0 end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""


class LockBusy(Exception):
    """Another compile or rollout of that site holds its lock."""


@contextmanager
def site_lock(site_id: int, *, wait: float = 0, ttl: float | None = None) -> Iterator[str]:
    """Hold one site's compile/rollout lock, renewed every third of its expiry while the holder
    lives; it expires by itself within `ttl` seconds if the holder dies. With `wait`, keep
    trying that many seconds: a rollout ends in about a second, so a change that arrives during
    one starts right after it instead of at the task's next retry. With Sentinel the lock is
    held once a replica has it too, so a failover never hands it to a second holder."""
    client = redis_client()
    key = lock_key(site_id)
    token = secrets.token_hex(16)
    ttl_ms = int((ttl or settings.PORTAL_FIREWALL_LOCK_TTL) * 1000)
    deadline = time.monotonic() + wait
    while not _lock_take(client, key, token, ttl_ms):
        if time.monotonic() >= deadline:
            raise LockBusy
        time.sleep(LOCK_POLL)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_ms / 3000):
            try:
                if not client.eval(_RENEW, 1, key, token, ttl_ms):
                    log.warning("firewall.lock_lost", site=site_id)
                    return
            except redis.RedisError as exc:  # try again at the next tick
                log.warning("firewall.lock_renew_failed", site=site_id, error=str(exc))

    renewer = threading.Thread(target=renew, name=f"firewall-lock-{site_id}", daemon=True)
    renewer.start()
    try:
        yield token
    finally:
        stop.set()
        renewer.join(timeout=2)
        client.eval(_RELEASE, 1, key, token)


def _lock_take(client: redis.Redis, key: str, token: str, ttl_ms: int) -> bool:
    """One attempt at a site lock; a taken lock is on the replicas before this returns."""
    if client.exists(key):  # busy: poll without writing (and without waiting for replicas)
        return False
    with client.pipeline(transaction=False) as pipe:
        pipe.eval(_ACQUIRE, 1, key, token, ttl_ms)
        (taken,) = replicated_execute(pipe)
    return bool(taken)


def _site_ids(site_ids: Iterable[int] | None) -> list[int]:
    if site_ids is not None:
        return list(site_ids)
    return list(Site.objects.filter(hosts__enabled=True).distinct().values_list("pk", flat=True))


def firewall_change_request(
    *,
    cause: str,
    force: bool = False,
    site_ids: Iterable[int] | None = None,
    request_id: str | None = None,
) -> list[int]:
    """Record a change for each site (all sites with enabled hosts unless `site_ids`) and
    schedule a run where none is scheduled yet (with Sentinel, once a replica holds the record);
    returns the sites scheduled now. `force`
    schedules even where automatic runs are switched off (staff's "push now"); `request_id`
    asks each site's run to report its outcome there (`push_request_outcome`)."""
    client = redis_client()
    sites = _site_ids(site_ids)
    # Not MULTI (WAIT does not wait inside it); each command stands alone, in this order, and
    # a retry after a failover only repeats a cause (taken once: firewall_causes_take).
    pipe = client.pipeline(transaction=False)
    for site in sites:
        pipe.rpush(causes_key(site), cause[:200])
        pipe.ltrim(causes_key(site), -200, -1)
        if request_id:
            pipe.sadd(requests_key(site), request_id)
        # The mark expires soon: if a scheduled run is ever lost (a purged queue, a flushed
        # broker), the next change schedules again within seconds instead of waiting for it.
        pipe.set(scheduled_key(site), str(time.time()), nx=True, ex=SCHEDULED_TTL)
    results = replicated_execute(pipe)  # the record survives a failover once this returns
    per_site = 4 if request_id else 3
    scheduled = [site for i, site in enumerate(sites) if results[i * per_site + per_site - 1]]
    if settings.PORTAL_FIREWALL_SYNC or force:
        for site in scheduled:
            # An idle site runs at once (nothing to gather a burst behind); while a run holds
            # the site's lock, the next one waits the debounce and carries everything since.
            busy = client.exists(lock_key(site))
            dispatch.firewall_sync(site, countdown=settings.PORTAL_FIREWALL_DEBOUNCE if busy else 0)
    return scheduled


def firewall_causes_take(site_id: int) -> tuple[list[str], list[str]]:
    """Clear the site's scheduled mark; take the causes and "push now" requests gathered since
    its last run."""
    client = redis_client()
    pipe = client.pipeline()
    pipe.delete(scheduled_key(site_id))
    pipe.lrange(causes_key(site_id), 0, -1)
    pipe.delete(causes_key(site_id))
    pipe.smembers(requests_key(site_id))
    pipe.delete(requests_key(site_id))
    _, causes, _, requests, _ = pipe.execute()
    return list(dict.fromkeys(causes)), sorted(requests)


def changes_waiting(site_id: int) -> bool:
    """Changes were recorded for the site but no run is scheduled (its task was lost)."""
    client = redis_client()
    return bool(client.llen(causes_key(site_id))) and not client.exists(scheduled_key(site_id))


def push_request_start(*, site_names: list[str]) -> str:
    """A new "push now" request expecting an outcome from each of these sites."""
    request_id = secrets.token_hex(8)
    client = redis_client()
    client.hset(request_key(request_id), "_sites", json.dumps(site_names))
    client.expire(request_key(request_id), REQUEST_TTL)
    return request_id


def push_request_report(request_ids: Iterable[str], *, site: str, outcome: dict[str, Any]) -> None:
    """A site's run reports what it did for the requests it carried."""
    client = redis_client()
    for request_id in request_ids:
        if client.exists(request_key(request_id)):
            client.hset(request_key(request_id), site, json.dumps(outcome))


def push_request_outcome(request_id: str) -> dict[str, Any] | None:
    """{"sites": [...], "done": {site: outcome}} of a request, or None when unknown/expired."""
    raw = redis_client().hgetall(request_key(request_id))
    if not raw:
        return None
    sites = json.loads(raw.pop("_sites", "[]"))
    return {"sites": sites, "done": {site: json.loads(v) for site, v in raw.items()}}
