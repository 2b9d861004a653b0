"""Errors reach a person: a forced exception is mailed to ADMINS and reaches the error tracker
(a small HTTP server on loopback stands in for the remote Sentry service); the env example's
placeholder SECRET_KEY is refused by `check --deploy` and `preflight`."""

from __future__ import annotations

import gzip
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import path

from apps.infra.errors import PLACEHOLDER_SECRET_KEY, admins_parse, sentry_init
from tests.integration.core.test_configuration import PRODUCTION, PY, ROOT, run

pytestmark = pytest.mark.django_db
SETTINGS = {"DJANGO_SETTINGS_MODULE": "portal.settings"}


@pytest.fixture
def boom() -> Iterator[str]:
    """A URL whose view raises, as a bug in production would."""
    import portal.urls

    def view(request: Any) -> Any:
        raise RuntimeError("forced failure 4711")

    portal.urls.urlpatterns.append(path("boom-for-errors-test/", view))
    try:
        yield "/boom-for-errors-test/"
    finally:
        portal.urls.urlpatterns.pop()


def test_a_500_is_mailed_to_the_admins(settings: Any, boom: str) -> None:
    settings.ADMINS = admins_parse("Ops <ops@example.org>, oncall@example.org")
    response = Client(raise_request_exception=False).get(boom)
    assert response.status_code == 500
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["ops@example.org", "oncall@example.org"]
    assert "forced failure 4711" in sent.subject + sent.body
    assert "RuntimeError" in sent.body


def test_without_admins_nothing_is_mailed(settings: Any, boom: str) -> None:
    settings.ADMINS = []
    assert Client(raise_request_exception=False).get(boom).status_code == 500
    assert mail.outbox == []


def test_admins_are_read_from_the_environment() -> None:
    code = "from django.conf import settings; print(settings.ADMINS)"
    env = {"ADMINS": "Ops <ops@example.org>, oncall@example.org", **SETTINGS}
    result = run([PY, "-c", f"import django; django.setup(); {code}"], env)
    assert result.returncode == 0, result.stderr
    assert "[('Ops', 'ops@example.org'), ('', 'oncall@example.org')]" in result.stdout


def test_a_wrong_admins_entry_is_named() -> None:
    with pytest.raises(ImproperlyConfigured, match="'ops at example' is not an e-mail address"):
        admins_parse("ops@example.org, ops at example")


class _Collector(http.server.BaseHTTPRequestHandler):
    """Stands in for the Sentry server: keeps every envelope it is sent."""

    received: list[bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.received.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tracker() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_500_reaches_the_error_tracker(boom: str, tracker: http.server.HTTPServer) -> None:
    import sentry_sdk

    assert not sentry_sdk.get_client().is_active()  # no SENTRY_DSN: nothing initialised
    port = tracker.server_address[1]
    assert sentry_init(dsn=f"http://publickey@127.0.0.1:{port}/42", environment="test")
    try:
        assert Client(raise_request_exception=False).get(boom).status_code == 500
        sentry_sdk.flush(timeout=10)
    finally:
        sentry_sdk.init()  # no DSN again: the rest of the run reports nothing
    received = tracker.received  # type: ignore[attr-defined]
    assert [p for p, _ in received] == ["/api/42/envelope/"]
    items = [json.loads(line) for line in received[0][1].splitlines() if line.startswith(b"{")]
    event = next(item for item in items if "exception" in item)
    exception = event["exception"]["values"][-1]
    assert exception["type"] == "RuntimeError"
    assert exception["value"] == "forced failure 4711"
    assert event["environment"] == "test"
    assert not event.get("request", {}).get("cookies")  # no personal data collected
    assert "vars" not in exception["stacktrace"]["frames"][-1]


def test_sentry_starts_only_with_a_dsn() -> None:
    code = "import sentry_sdk; print(sentry_sdk.get_client().is_active())"
    without = run(
        [PY, "-c", f"import django; django.setup(); {code}"], SETTINGS, drop=("SENTRY_DSN",)
    )
    assert without.stdout.strip() == "False", without.stderr
    env = {"SENTRY_DSN": "http://publickey@127.0.0.1:9/1", **SETTINGS}
    with_dsn = run([PY, "-c", f"import django; django.setup(); {code}"], env)
    assert with_dsn.stdout.strip() == "True", with_dsn.stderr


def _example_secret_key() -> str:
    lines = (ROOT / "deploy" / "portal.env.example").read_text().splitlines()
    return next(line.split("=", 1)[1] for line in lines if line.startswith("SECRET_KEY="))


def test_check_deploy_refuses_the_example_secret_key() -> None:
    assert _example_secret_key() == PLACEHOLDER_SECRET_KEY
    env = {**PRODUCTION, "SECRET_KEY": _example_secret_key()}
    result = run([PY, "manage.py", "check", "--deploy"], env)
    assert result.returncode != 0
    assert "portal.E001" in result.stderr
    assert "SECRET_KEY is still the placeholder from deploy/portal.env.example" in result.stderr
    assert "secrets.token_urlsafe(50)" in result.stderr


def test_preflight_refuses_the_example_secret_key(settings: Any) -> None:
    settings.SECRET_KEY = PLACEHOLDER_SECRET_KEY
    with pytest.raises(CommandError, match="SECRET_KEY is still the placeholder"):
        call_command("preflight")


def test_preflight_accepts_a_real_key(settings: Any, capsys: Any) -> None:
    settings.SECRET_KEY = "x7$kq-production-like-secret-key-with-enough-entropy-9f8e7d6c5b4a"
    call_command("preflight")
    assert "PostgreSQL and Redis answer" in capsys.readouterr().out


def test_a_failed_task_is_mailed_to_the_admins(settings: Any) -> None:
    """Celery logs a task that raised on celery.app.trace; that reaches ADMINS too."""
    import logging

    settings.ADMINS = admins_parse("ops@example.org")
    try:
        raise RuntimeError("task failure 0815")
    except RuntimeError:
        logging.getLogger("celery.app.trace").exception("Task workers.x.y[1] raised")
    assert len(mail.outbox) == 1
    assert "task failure 0815" in mail.outbox[0].body
