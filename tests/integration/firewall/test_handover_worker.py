"""The firewall worker restarted as an operator does it: the real Celery worker under the
handover supervisor (apps/infra/handover.py), `systemctl reload portal-firewall` being SIGHUP to
it. The old worker keeps taking tasks while the new one starts; a change sent during the
handover runs exactly once; the new worker takes the changes after it. (No host: the site's run
has nothing to push, its log line is what is counted. The lab's restart with hosts and a real
forward: the bench, tests/bench/pipeline_bench.py `_restart`.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.firewall.models import Site
from apps.infra.celery import app
from tests import celery_proc
from tests.celery_proc import CELERY, ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SYNC = "workers.firewall.firewall_sync"


@pytest.fixture
def supervised(tmp_path, firewall_redis_clean):
    log = tmp_path / "worker.log"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings_test",
               DATABASE_URL=celery_proc.test_database_url())  # fmt: skip
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "apps.infra.handover", "--", CELERY, "-A", "portal", "worker",
         "-Q", "firewall", "--pool", "threads", "--concurrency", "4", "--purge",
         "--without-mingle", "--without-gossip", "-l", "INFO",
         "--hostname", f"fwhandover-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
        start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: "takes tasks" in log.read_text(), 60), log.read_text()
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


def synced(log: Path, cause: str) -> int:
    return sum(
        1 for line in log.read_text().splitlines() if "firewall.synced" in line and cause in line
    )


def test_a_change_during_the_reload_runs_once_and_the_new_worker_takes_the_next(supervised):
    proc, log = supervised
    site = Site.objects.order_by("pk").first() or Site.objects.create(name="main")
    app.send_task(SYNC, args=(site.pk,), kwargs={"cause": "before-reload"})
    assert wait_until(lambda: synced(log, "before-reload"), 30), log.read_text()

    proc.send_signal(signal.SIGHUP)  # systemctl reload portal-firewall
    sent = time.monotonic()
    app.send_task(SYNC, args=(site.pk,), kwargs={"cause": "during-reload"})
    # Served by the old worker while the new one still starts (imports, warms up).
    assert wait_until(lambda: synced(log, "during-reload"), 30), log.read_text()
    served = time.monotonic() - sent
    assert wait_until(lambda: "takes tasks, handover" in log.read_text(), 90), log.read_text()
    handover = re.search(r"handover (\d+\.\d+) s", log.read_text())
    assert handover is not None
    assert served < float(handover.group(1))  # it did not wait for the new worker
    assert log.read_text().count(" ready.") == 2  # the new worker's Celery said it serves

    app.send_task(SYNC, args=(site.pk,), kwargs={"cause": "after-reload"})
    assert wait_until(lambda: synced(log, "after-reload"), 30), log.read_text()
    time.sleep(1.0)  # a second delivery of any of them would show by now
    assert synced(log, "before-reload") == 1
    assert synced(log, "during-reload") == 1
    assert synced(log, "after-reload") == 1
    assert proc.poll() is None  # the supervisor serves on with the new worker
