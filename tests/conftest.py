"""Shared fixtures: one user per role, and logged-in clients. Also what an ordinary user's
`make test` leaves out: tests that need root are skipped without root, and named in one line."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from django.test import Client

from tests.factories import UserFactory

ROLES = ["member", "volunteer", "support", "admin"]


@pytest.fixture
def make_user(db):
    """Create a user with the given roles."""

    def make(username: str | None = None, roles: tuple[str, ...] = ("member",), **kw):
        if username:
            kw["username"] = username
        user = UserFactory(roles=list(roles), **kw)
        if "admin" in roles:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        return user

    return make


@pytest.fixture
def client_for(make_user):
    """A test client logged in as a new user holding `role`."""

    def make(role: str) -> Client:
        client = Client()
        client.force_login(make_user(roles=(role,)))
        return client

    return make


@pytest.fixture
def firewall_redis_clean():
    """No scheduled marks, causes, locks or requests of the firewall pipeline left over."""
    from apps.infra.redis import redis_client

    client = redis_client()

    def clean() -> None:
        keys = list(client.scan_iter("portal:firewall:*"))
        if keys:
            client.delete(*keys)

    clean()
    yield
    clean()


@pytest.fixture
def staff_2fa(settings):
    """The second factor required for staff, as in production (tests run with it off)."""
    settings.PORTAL_REQUIRE_STAFF_2FA = True
    return settings


def totp_code(device, step: int = 0) -> str:
    """The code `device`'s app shows now, or `step` 30-second steps later (a code that has not
    been used yet: the portal refuses a step it has already accepted)."""
    from django_otp.oath import totp

    return f"{totp(device.bin_key, device.step, device.t0, device.digits, step):0{device.digits}d}"


@pytest.fixture
def enrol_second_factor(db):
    """Give a user a confirmed authenticator; returns (device, recovery codes)."""
    from apps.accounts.twofactor import totp_enrol_confirm, totp_enrol_start

    def enrol(user):
        device = totp_enrol_start(user=user)
        codes = totp_enrol_confirm(user=user, device=device, code=totp_code(device))
        device.refresh_from_db()
        return device, codes

    return enrol


@pytest.fixture(autouse=True)
def _default_language_after_each_test():
    """A request in German leaves German active in this thread (LocaleMiddleware activates it
    and nothing deactivates it): the next test starts in the default language again."""
    yield
    from django.utils import translation

    translation.deactivate()


@pytest.fixture(autouse=True)
def throttle_counters_clean():
    """Every test starts with no rate-limit counters (they live in Redis, outside the test's
    transaction, and the test client always comes from 127.0.0.1)."""
    from apps.accounts.throttle import KEY_PREFIX
    from apps.infra.redis import redis_client

    client = redis_client()
    keys = list(client.scan_iter(f"{KEY_PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def status_cache_clean():
    """Every test starts with no cached status page data: it lives in Redis, outside the test's
    transaction, so an incident of an earlier test would otherwise show in this one's banner."""
    from apps.tickets.status import status_cache_clear

    status_cache_clear()


# Without root, `make test` runs everything else and says in one line what it left out (CI runs
# as root and skips nothing). A test needs root when it is marked `lab` or uses one of these
# fixtures (network namespaces, nft/tc in them).
ROOT_FIXTURES = {"lab", "lab_tools", "scratch_ns"}
SKIPPED_LINE = Path(__file__).resolve().parents[1] / "test-artifacts" / "skipped.txt"
# `make test` runs in two phases (deploy/dev/test.sh): the second adds its skipped tests to the
# first one's counts, kept here, and writes the one line for both.
SKIPPED_COUNTS = SKIPPED_LINE.with_name("skipped.json")


def _second_phase() -> bool:
    return os.environ.get("PORTAL_TEST_PHASE") == "2"


def _needs_root(item: pytest.Item) -> bool:
    return item.get_closest_marker("lab") is not None or bool(
        ROOT_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected what does not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _second_phase():
        SKIPPED_LINE.unlink(missing_ok=True)
        SKIPPED_COUNTS.unlink(missing_ok=True)
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root for network namespaces")
    for item in items:
        if _needs_root(item):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Leave one closing line naming every skipped test's reason and where, for
    deploy/dev/test.sh to print after pytest's own summary."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller reports for every worker
    by_reason: dict[str, Counter[str]] = {}
    if _second_phase() and SKIPPED_COUNTS.exists():
        for reason, where in json.loads(SKIPPED_COUNTS.read_text()).items():
            by_reason[reason] = Counter(where)
    for report in terminalreporter.stats.get("skipped", []):
        path, _line, reason = report.longrepr  # a skip's longrepr: (file, line, "Skipped: ...")
        relative = Path(path).resolve().relative_to(config.rootpath)
        where = "/".join(relative.parts[:3])  # tests/e2e/lab
        by_reason.setdefault(reason.removeprefix("Skipped: "), Counter())[where] += 1
    SKIPPED_LINE.parent.mkdir(exist_ok=True)
    SKIPPED_COUNTS.write_text(json.dumps(by_reason))
    if not by_reason:
        SKIPPED_LINE.unlink(missing_ok=True)
        return
    parts = []
    for reason, where in sorted(by_reason.items()):
        places = ", ".join(f"{n} in {d}" for d, n in sorted(where.items()))
        parts.append(f"{reason}: {places}")
    total = sum(sum(w.values()) for w in by_reason.values())
    hint = " Run `make test` as root (as CI does) to run them too." if os.geteuid() else ""
    SKIPPED_LINE.parent.mkdir(exist_ok=True)
    SKIPPED_LINE.write_text(f"Skipped {total} tests ({'; '.join(parts)}).{hint}\n")
