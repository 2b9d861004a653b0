"""The real client address behind the shipped nginx: gunicorn as the shipped unit starts it, in
production mode (DEBUG=0, TLS at nginx), two clients on two loopback addresses.

Every client used to be nginx's 127.0.0.1 to the portal, so one attacker locked `admin` out for
everyone and the sign-up limits were one bucket for the whole dorm."""

from __future__ import annotations

import os
import urllib.parse

import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from tests.deploy.stack import (
    DEPLOY,
    ROOT,
    Browser,
    Nginx,
    free_port,
    start_unit,
    stop,
    wait_for_port,
)

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"  # three clients; loopback, and none is nginx
FAILURES = 3


def database_url() -> str:
    db = connection.settings_dict
    host = urllib.parse.quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    port = f":{db['PORT']}" if db.get("PORT") else ""
    password = f":{urllib.parse.quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    return f"postgresql://{db['USER']}{password}@{host}{port}/{db['NAME']}"


@pytest.fixture
def portal(scratch, transactional_db):
    """The shipped nginx site in front of gunicorn started by the shipped portal-web unit."""
    web_port = free_port()
    nginx = Nginx(site=(DEPLOY / "nginx/portal.conf").read_text(), prefix=scratch,
                  upstream_port=web_port, home=ROOT)  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "portal.settings_test",  # the tests' Redis database and hasher
        "DEBUG": "0",
        "SECRET_KEY": "a-test-key-" + "x" * 50,
        "DATABASE_URL": database_url(),
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": f"https://127.0.0.1:{nginx.https_port}",
        "AXES_FAILURE_LIMIT": str(FAILURES),
        "PORTAL_TRUSTED_PROXIES": "127.0.0.1/32,::1/128",  # what the env example ships
        "LOG_FORMAT": "console",
    }
    log = scratch / "gunicorn.log"
    web = start_unit(DEPLOY / "systemd/portal-web.service", env=env, cwd=ROOT, log=log,
                     replace={"/srv/portal": str(ROOT), "127.0.0.1:8000": f"127.0.0.1:{web_port}",
                              "--workers 4": "--workers 2"})  # fmt: skip
    try:
        wait_for_port(web_port, proc=web, log=log)
        nginx.start()
        yield nginx, web_port
    finally:
        nginx.stop()
        stop(web)
        keys = [f"signup:{kind}:{ip}" for kind in ("attempts", "accounts") for ip in (A, B, C)]
        cache.delete_many([*keys, "signup:attempts:127.0.0.1", "signup:accounts:127.0.0.1"])


def login(browser: Browser, password: str, headers: dict[str, str] | None = None):
    return browser.post_form(
        "/accounts/login/", {"username": "admin", "password": password}, headers=headers
    )


def test_two_clients_behind_nginx_are_locked_out_separately_and_a_forged_header_is_ignored(
    portal, make_user
):
    nginx, web_port = portal
    admin = make_user("admin", roles=("admin",))
    admin.set_password("right-password-1")
    admin.save()
    attacker, member = Browser(A, nginx.origin), Browser(B, nginx.origin)

    for _ in range(FAILURES):
        answer = login(attacker, "guess")
    assert answer.status == 429, answer.status  # the attacker is locked out ...
    assert login(attacker, "right-password-1").status == 429
    answer = login(member, "right-password-1")  # ... and the real admin elsewhere is not
    assert answer.status == 302, (answer.status, answer.body[:300])
    assert answer.headers["Location"] == "/"

    # A forged X-Forwarded-For through nginx: nginx appends the real peer, the portal reads that.
    forged = {"X-Forwarded-For": C}
    assert login(Browser(A, nginx.origin), "right-password-1", forged).status == 429

    # Straight to gunicorn from an untrusted peer: its X-Forwarded-For is not believed (else it
    # would be C, who is not locked out). It sends X-Forwarded-Proto itself, as nginx would.
    direct = Browser(A, f"http://127.0.0.1:{web_port}")
    headers = {**forged, "X-Forwarded-Proto": "https", "Origin": nginx.origin}
    answer = login(direct, "right-password-1", headers)
    assert answer.status == 429, (answer.status, answer.body[:300])

    # The login records (axes' trail) name the real clients, never nginx.
    from axes.models import AccessAttempt, AccessLog

    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {A}
    assert set(AccessLog.objects.values_list("ip_address", flat=True)) == {B}


def test_the_sign_up_limit_counts_per_client_behind_nginx(portal):
    nginx, _ = portal
    form = {"first_name": "", "last_name": "", "email": "x", "room": "", "password1": "a"}
    for _ in range(2):
        answer = Browser(A, nginx.origin).post_form("/signup/", form)
        assert answer.status == 422, answer.status  # an invalid form, counted
    Browser(B, nginx.origin).post_form("/signup/", form)
    assert cache.get(f"signup:attempts:{A}") == 2
    assert cache.get(f"signup:attempts:{B}") == 1
    assert cache.get("signup:attempts:127.0.0.1") is None  # nginx itself is nobody's bucket
    assert settings.PORTAL_TRUSTED_PROXIES == ["127.0.0.1/32", "::1/128"]
