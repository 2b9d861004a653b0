"""Makes changes through the portal's own Redis users while the Sentinel test fails the primary:
a cache entry, the firewall site lock, a recorded network change and a Celery task per change.
Prints one JSON line per change once all four were acknowledged.

    python -m tests.ha_procs.redis_writer COUNT SITE_ID
"""

from __future__ import annotations

import json
import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings_test")
django.setup()

from django.core.cache import cache  # noqa: E402

from apps.firewall.pipeline import firewall_change_request, site_lock  # noqa: E402
from apps.infra.celery import app  # noqa: E402


def main(count: int, site: int) -> None:
    for i in range(count):
        started = time.monotonic()
        cache.set(f"ha:{i}", i, 600)
        with site_lock(site, wait=30):
            firewall_change_request(cause=f"change {i}", site_ids=[site])
        app.send_task("tests.ha.record", args=(i,))
        took = round(time.monotonic() - started, 3)
        print(json.dumps({"i": i, "took": took}), flush=True)  # noqa: T201
        time.sleep(0.05)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
