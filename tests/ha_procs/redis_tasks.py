"""A task the Sentinel test's worker loads (--include): it records each run in Redis through the
portal's own client, so the test can tell that every task sent during a failover ran."""

from __future__ import annotations

from celery import shared_task

DONE_KEY = "portal:test:ha:done"


@shared_task(name="tests.ha.record", ignore_result=True)
def record(i: int) -> None:
    from portal.redis import redis_client

    redis_client().sadd(DONE_KEY, i)
