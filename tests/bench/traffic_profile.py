"""Where a traffic reading's portal time goes: the bench's portal side (tests.bench.
traffic_bench.portal_side) with every SQL statement over 50 ms printed with its time, and each
store's total (COPY and commit included).

    DATABASE_URL=... DJANGO_SETTINGS_MODULE=portal.settings .venv/bin/python -m tests.bench.traffic_profile

With `--plain`, the store runs without its transaction settings (services.STORE_SETTINGS:
work_mem, jit), for a side-by-side comparison.
"""

from __future__ import annotations

import json
import sys
import time

import django


def main() -> None:
    django.setup()
    from django.db import connection

    import apps.traffic.services as services
    from tests.bench import traffic_bench

    times: list[tuple[float, str]] = []

    def wrapper(execute, sql, params, many, context):
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            times.append((time.perf_counter() - start, " ".join(sql.split())[:70]))

    if "--plain" in sys.argv[1:]:
        services.STORE_SETTINGS = ()
    store = services.traffic_store

    def timed(**kwargs):
        times.append((0.0, "---- store"))
        start = time.perf_counter()
        outcome = store(**kwargs)
        times.append((time.perf_counter() - start, "== store total (COPY and commit included)"))
        return outcome

    services.traffic_store = timed
    with connection.execute_wrapper(wrapper):
        result = traffic_bench.portal_side()
    for seconds, sql in times:
        if seconds > 0.05 or sql.startswith("----"):
            print(f"{seconds:7.2f} {sql}")  # noqa: T201
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
