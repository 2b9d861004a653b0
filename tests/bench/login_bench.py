"""Sign-in: the server time of a login POST (Django's test client, the whole middleware stack:
django-axes, django-otp, sessions), run by tests/bench/run.py in a scratch database.

Measures, side by side in one run: the configured first hasher against Django's PBKDF2 default,
a login whose stored hash is still PBKDF2 (checked, then upgraded), and a wrong password (which
django-axes counts). `--profile` prints a pyinstrument profile of 20 logins instead.

Prints one JSON list of rows (name, value, unit, target) on the last line of stdout.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import django

ROUNDS = 30
PASSWORD = "correct horse battery staple 16"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * 0.95) - 1)]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from axes.models import AccessAttempt
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import get_hasher, identify_hasher, make_password
    from django.test import Client

    from tests.factories import MemberFactory

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    User = get_user_model()
    users = []
    for n in range(ROUNDS):
        member = MemberFactory(user__username=f"bench-login-{n}")
        member.user.set_password(PASSWORD)
        member.user.save(update_fields=["password"])
        users.append(member.user)
    url = "/accounts/login/"

    def login(username: str, password: str) -> tuple[float, int]:
        client = Client(REMOTE_ADDR="192.0.2.77")
        client.get(url)  # the form (CSRF cookie), as the browser has it before it posts
        start = time.perf_counter()
        response = client.post(url, {"username": username, "password": password})
        return (time.perf_counter() - start) * 1000, response.status_code

    if "--profile" in sys.argv:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        with profiler:
            for user in users[:20]:
                login(user.username, PASSWORD)
        print(profiler.output_text(unicode=False, color=False, show_all=False))  # noqa: T201
        return

    first = get_hasher("default")
    pbkdf2 = get_hasher("pbkdf2_sha256")
    rows: list[tuple[str, str, str, str]] = []

    def hasher_ms(hasher: object) -> float:
        encoded = hasher.encode(PASSWORD, hasher.salt())
        times = []
        for _n in range(5):
            start = time.perf_counter()
            hasher.verify(PASSWORD, encoded)
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    ours, default = hasher_ms(first), hasher_ms(pbkdf2)
    rows.append(
        (
            f"one password check, first hasher {first.algorithm} "
            f"({', '.join(f'{k} {v}' for k, v in _params(first).items())}), median",
            f"{ours:.0f}",
            "ms",
            "",
        )
    )
    rows.append(
        (
            f"... Django's default pbkdf2_sha256 ({pbkdf2.iterations:,} iterations) beside it",
            f"{default:.0f}",
            "ms",
            "",
        )
    )

    # Logins with the first hasher's hashes (the steady state).
    times = []
    for user in users:
        took, status = login(user.username, PASSWORD)
        assert status == 302, status
        times.append(took)
    rows.append(
        (
            f"login POST, correct password ({len(times)} logins; p50 {statistics.median(times):.0f} ms)",
            f"{_p95(times):.0f}",
            "ms p95",
            "< 300 ms",
        )
    )

    # The same logins with Django's default PBKDF2 as the first hasher (the portal before
    # Argon2), side by side on the same loaded machine.
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        for user in users:
            User.objects.filter(pk=user.pk).update(password=make_password(PASSWORD))
        times = []
        for user in users:
            took, status = login(user.username, PASSWORD)
            assert status == 302, status
            times.append(took)
    rows.append(
        (
            f"... the same logins with PBKDF2 as the first hasher, as before (p50 "
            f"{statistics.median(times):.0f} ms)",
            f"{_p95(times):.0f}",
            "ms p95",
            "",
        )
    )

    # A stored PBKDF2 hash (every account before this change): checked, then upgraded.
    for user in users:
        User.objects.filter(pk=user.pk).update(
            password=make_password(PASSWORD, hasher="pbkdf2_sha256")
        )
    times = []
    for user in users:
        took, status = login(user.username, PASSWORD)
        assert status == 302, status
        times.append(took)
    upgraded = sum(
        identify_hasher(p).algorithm == first.algorithm
        for p in User.objects.filter(pk__in=[u.pk for u in users]).values_list(
            "password", flat=True
        )
    )
    rows.append(
        (
            f"login POST with an old PBKDF2 hash, upgraded on the way (p50 "
            f"{statistics.median(times):.0f} ms; {upgraded}/{len(users)} upgraded)",
            f"{_p95(times):.0f}",
            "ms p95",
            "",
        )
    )

    # Wrong passwords: still a full hash check, and counted by django-axes.
    times = []
    for user in users:
        took, status = login(user.username, "wrong " + PASSWORD)
        assert status == 200, status
        times.append(took)
    counted = AccessAttempt.objects.filter(username__startswith="bench-login-").count()
    rows.append(
        (
            f"login POST, wrong password (p50 {statistics.median(times):.0f} ms; "
            f"{counted}/{len(users)} counted by the lockout)",
            f"{_p95(times):.0f}",
            "ms p95",
            "< 300 ms",
        )
    )
    print(json.dumps(rows))  # noqa: T201


def _params(hasher: object) -> dict[str, object]:
    names = ("time_cost", "memory_cost", "parallelism", "iterations", "rounds")
    return {name: getattr(hasher, name) for name in names if hasattr(hasher, name)}


if __name__ == "__main__":
    main()
