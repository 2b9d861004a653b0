"""A task the Sentinel test's worker loads (--include): it records each run in Redis through the
portal's own client, waiting for the replica like every write that must survive a failover
(else a record made in the primary's last instant would be lost and look like a lost task)."""

from __future__ import annotations

from celery import shared_task

DONE_KEY = "portal:test:ha:done"


@shared_task(name="tests.ha.record", ignore_result=True)
def record(i: int) -> None:
    from apps.infra.redis import redis_client, replicated_execute

    with redis_client().pipeline(transaction=False) as pipe:
        pipe.sadd(DONE_KEY, i)
        replicated_execute(pipe)


@shared_task(name="tests.ha.hold", ignore_result=True)
def hold(seconds: float) -> None:
    """Runs (unacknowledged: the portal acknowledges late) while the test breaks the broker."""
    import time

    time.sleep(seconds)
