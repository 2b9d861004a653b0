"""PostgreSQL primary + hot standby: a running portal (gunicorn, as in production) on a multi-host
DATABASE_URL with target_session_attrs=read-write. The primary crashes while an admin adds
groups; once the standby is promoted, the same portal process writes again, without a restart,
and every group it had acknowledged is there."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, HTTPRedirectHandler, Request, build_opener

import pytest
from django.contrib.auth.hashers import make_password
from django.db import connection

from apps.infra.dburl import database_from_url
from tests.celery_proc import ROOT, wait_until
from tests.ha import env_without, free_port, pg_pair, proc_stop

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
PASSWORD = "standby-test-password"


class _NoRedirect(HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """A signed-in admin's browser: cookies, CSRF token, no redirects followed."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = build_opener(HTTPCookieProcessor(self.jar), _NoRedirect)

    def request(self, path: str, data: dict[str, str] | None = None) -> int:
        body = None
        if data is not None:
            token = next(c.value for c in self.jar if c.name == "csrftoken")
            body = urlencode({**data, "csrfmiddlewaretoken": token}).encode()
        try:
            request = Request(self.base + path, data=body)  # noqa: S310 - http://127.0.0.1 only
            with self.opener.open(request, timeout=15) as response:
                return response.status
        except HTTPError as exc:
            return exc.code
        except (URLError, OSError):
            return 0


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def test_a_multi_host_url_keeps_every_host_and_asks_for_the_primary():
    db = database_from_url("postgresql://portal:pw@db1:5432,[fd00::5]:5433/portal", conn_max_age=60)
    assert (db["HOST"], db["PORT"], db["NAME"]) == ("db1,fd00::5", "5432,5433", "portal")
    assert db["OPTIONS"]["target_session_attrs"] == "read-write"
    assert db["CONN_HEALTH_CHECKS"] is True
    one = database_from_url("postgresql://portal@db1:5432/portal", conn_max_age=60)
    assert (one["HOST"], one["PORT"]) == ("db1", 5432)
    assert "target_session_attrs" not in one.get("OPTIONS", {})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://p@db1,:5433/portal", "not host"),
        ("postgresql://p@db1:70000,db2/portal", "no valid port"),
        ("postgresql://p@db1,db2/portal?target_session_attrs=master", "not one of"),
    ],
)
def test_a_broken_host_list_is_named(url, message):
    with pytest.raises(ValueError, match=message):
        database_from_url(url, conn_max_age=60)


def test_the_portal_survives_a_primary_crash_once_the_standby_is_promoted(django_db_setup):
    test_db = connection.settings_dict
    load = {"host": str(test_db["HOST"]), "port": str(test_db["PORT"] or 5432)}
    with pg_pair(load_from={**load, "name": test_db["NAME"]}) as pair:
        hashed = make_password(PASSWORD)
        admin_row = (
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, "
            "email, is_staff, is_active, date_joined) VALUES ('HASH', true, 'ha-admin', "
            "'', '', '', true, true, now())"
        ).replace("HASH", hashed)
        pair.psql(pair.primary_port, admin_row)
        port = free_port()
        log = open(pair.root / "gunicorn.log", "w")  # noqa: SIM115 - closed in finally
        web = subprocess.Popen(
            [
                GUNICORN,
                "--workers",
                "1",
                "--bind",
                f"127.0.0.1:{port}",
                "--timeout",
                "60",
                "portal.wsgi",
            ],
            cwd=ROOT,
            env=env_without(
                "DJANGO_ALLOW_ASYNC_UNSAFE",
                DATABASE_URL=pair.url(),
                DJANGO_SETTINGS_MODULE="portal.settings_test",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stop = threading.Event()
        acked: list[tuple[str, float]] = []
        refused: list[tuple[str, int]] = []

        def add_groups(browser: Browser) -> None:
            i = 0
            while not stop.is_set():
                name = f"ha-group-{i}"
                status = browser.request("/admin/auth/group/add/", {"name": name})
                if status == 302:
                    acked.append((name, time.monotonic()))
                else:
                    refused.append((name, status))
                i += 1
                time.sleep(0.1)

        try:
            browser = Browser(f"http://127.0.0.1:{port}")
            assert wait_until(lambda: browser.request("/admin/login/") == 200, 30), pair.logs()
            workers = _children(web.pid)
            assert len(workers) == 1
            status = browser.request(
                "/admin/login/?next=/admin/",
                {"username": "ha-admin", "password": PASSWORD, "next": "/admin/"},
            )
            assert status == 302
            writer = threading.Thread(target=add_groups, args=(browser,), daemon=True)
            writer.start()
            assert wait_until(lambda: len(acked) >= 5, 20), (refused, pair.logs())

            pair.crash_primary()
            time.sleep(1)  # the portal meets a dead primary and a read-only standby meanwhile
            promoted_at = time.monotonic()
            pair.promote_standby()
            recovered = wait_until(lambda: sum(1 for _, at in acked if at > promoted_at) >= 5, 30)
            stop.set()
            writer.join(timeout=20)
            assert recovered, (refused[-5:], (pair.root / "gunicorn.log").read_text()[-3000:])

            # Same processes: the master never restarted its worker.
            assert web.poll() is None
            assert _children(web.pid) == workers
            # Every acknowledged group is on the promoted standby; the session (a database
            # row, written before the crash) still signs the admin in.
            stored = set(
                pair.psql(
                    pair.standby_port, "SELECT name FROM auth_group WHERE name LIKE 'ha-group-%'"
                ).split()
            )
            assert {name for name, _ in acked} <= stored
            assert browser.request("/admin/") == 200
            first_after = min(at for _, at in acked if at > promoted_at) - promoted_at
            print(  # noqa: T201
                f"acknowledged {len(acked)}, refused {len(refused)} while no primary; "
                f"first write {first_after:.2f} s after the promotion"
            )
        finally:
            stop.set()
            proc_stop(web)
            log.close()
