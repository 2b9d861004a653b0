"""CSV downloads of the staff tables at 20,000 members / ~60,000 devices: time to the first byte,
total time, and the Python memory the streamed download holds at its peak (far below the file's
size, because rows are written as they are read).

Run by tests/bench/run.py in a subprocess with DATABASE_URL set; prints one JSON list of rows.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.conf import settings
    from django.db import transaction
    from django.test import Client

    from tests.factories import UserFactory

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    rows = []
    with transaction.atomic():  # the bench user and the audit rows are rolled back
        client = Client()
        client.force_login(UserFactory(username="bench-export", roles=["volunteer"]))
        for name, url in (
            ("members.csv, all members", "/office-hours/members.csv"),
            ("devices.csv, all devices", "/office-hours/devices.csv"),
            ("members.csv, search 'Fischer'", "/office-hours/members.csv?q=Fischer"),
        ):
            client.get(url)  # warm: imports, translations, plans
            start = time.perf_counter()
            chunks = iter(client.get(url).streaming_content)
            first = next(chunks)
            first_at = time.perf_counter() - start
            size, lines = len(first), first.count(b"\n")
            for chunk in chunks:
                size += len(chunk)
                lines += chunk.count(b"\n")
            total = time.perf_counter() - start
            # Memory in a second pass: tracemalloc slows Python down several times.
            tracemalloc.start()
            for _chunk in client.get(url).streaming_content:
                pass
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            rows += [
                (f"{name}: first byte", f"{first_at * 1000:.0f}", "ms", "< 1 s"),
                (f"{name}: whole file ({lines - 1} rows, {size / 1e6:.1f} MB)",
                 f"{total:.2f}", "s", ""),
                (f"{name}: peak Python memory while streaming", f"{peak / 1e6:.1f}", "MB",
                 "well below the file"),
            ]  # fmt: skip
        transaction.set_rollback(True)
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    main()
