"""/healthz as a load balancer or monitor calls it: gunicorn as the shipped unit starts it (one
worker, DEBUG=0), a new connection per request, PostgreSQL and Redis checked on every call.

Run by tests/bench/run.py; prints one JSON list of rows (name, value, unit, target) last.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import statistics
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.deploy.stack import DEPLOY, free_port, start_unit, stop, wait_for_port  # noqa: E402

REDIS_DB = 8  # its own database: the fake heartbeat below must not reach `make run`'s status
REQUESTS = 500


def main() -> None:
    run = ROOT / "var/run"
    port = free_port()
    log = ROOT / "var/healthz-bench.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DEBUG": "0",
        "SECRET_KEY": "bench-" + "k" * 50,
        "DATABASE_URL": os.environ["DATABASE_URL"],  # run.py's scratch database, migrated
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "REDIS_URL": f"unix://{run}/redis.sock?db={REDIS_DB}",
        "CELERY_BROKER_URL": f"redis+socket://{run}/redis.sock?virtual_host={REDIS_DB}",
        "LOG_LEVEL": "WARNING",
    }
    store = redis.Redis(unix_socket_path=str(run / "redis.sock"), db=REDIS_DB)
    # A worker that just answered beat's heartbeat (the healthy case: every check runs).
    store.hset("portal:heartbeat", mapping={"at": dt.datetime.now(dt.UTC).isoformat()})
    web = start_unit(DEPLOY / "systemd/portal-web.service", env=env, cwd=ROOT, log=log,
                     replace={"/srv/portal": str(ROOT), "127.0.0.1:8000": f"127.0.0.1:{port}",
                              "--workers 4": "--workers 1", "--access-logfile -": ""})  # fmt: skip
    try:
        wait_for_port(port, proc=web, log=log)
        times = []
        for n in range(REQUESTS + 20):
            start = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/healthz", headers={"Host": "127.0.0.1"})
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            elapsed = (time.perf_counter() - start) * 1000
            assert answer.status == 200, body
            if n >= 20:  # the first requests open the database and Redis connections
                times.append(elapsed)
    finally:
        stop(web)
        store.flushdb()
    times.sort()
    p95 = times[int(len(times) * 0.95) - 1]
    rows = [
        (f"/healthz p50 ({REQUESTS} requests, a new connection each)",
         f"{statistics.median(times):.1f}", "ms", ""),
        ("/healthz p95 (database, Redis and worker heartbeat checked)", f"{p95:.1f}", "ms",
         "< 50 ms"),
        ("/healthz slowest", f"{times[-1]:.1f}", "ms", ""),
    ]  # fmt: skip
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    main()
