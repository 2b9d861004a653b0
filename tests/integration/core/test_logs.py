"""Logs (issue 14): one structlog format everywhere, JSON in production, the level from
LOG_LEVEL, a request or task id on each line, and no secret in any line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from django.urls import reverse

from apps.infra.logs import _shared_processors

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def lines():
    """Every log line the root logger writes meanwhile, rendered as production does (JSON)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=_shared_processors(),
        )
    )
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line]
    finally:
        root.removeHandler(handler)


def test_production_writes_json_lines_at_the_level_of_LOG_LEVEL():
    code = (
        "import django, logging, structlog; django.setup();"
        "logging.getLogger('portal.test').info('hidden');"
        "logging.getLogger('portal.test').warning('shown %s', 'here');"
        "structlog.get_logger('portal.test').error('event', password='hunter2')"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "0",
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "portal.example",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("LOG_FORMAT", None)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    records = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert [r["event"] for r in records] == ["shown here", "event"]
    assert {r["level"] for r in records} == {"warning", "error"}
    assert all("timestamp" in r for r in records)
    assert records[1]["password"] == "[redacted]"
    assert "hunter2" not in out.stderr


def test_each_request_has_an_id_on_its_lines_and_no_password_is_logged(client, lines):
    password = "Hunter2-not-the-right-one"
    response = client.post(
        reverse("login"), {"username": "nobody", "password": password},
        HTTP_X_REQUEST_ID="req-from-nginx-0001",
    )  # fmt: skip
    assert response["X-Request-ID"] == "req-from-nginx-0001"
    logging.getLogger("portal.test").warning("after the request")
    written = lines()
    assert any(r.get("request_id") == "req-from-nginx-0001" for r in written), written
    assert written[-1].get("request_id") is None  # cleared when the request ended
    assert password not in json.dumps(written)
    # A header that is not a sane id is replaced, never echoed.
    odd = client.get(reverse("login"), HTTP_X_REQUEST_ID="bad id\nInjected: 1")
    assert odd["X-Request-ID"] != "bad id\nInjected: 1"
    assert len(odd["X-Request-ID"]) == 32


def test_a_tasks_lines_carry_its_id_and_name(lines):
    from celery.signals import task_postrun, task_prerun

    class Task:
        name = "workers.firewall.firewall_sync"

    task_prerun.send(sender=None, task_id="4f0c-task", task=Task())
    logging.getLogger("workers.firewall").warning("pushing")
    task_postrun.send(sender=None, task_id="4f0c-task", task=Task())
    logging.getLogger("workers.firewall").warning("idle")
    first, second = lines()[-2:]
    assert (first["task_id"], first["task"]) == ("4f0c-task", "workers.firewall.firewall_sync")
    assert "task_id" not in second


def test_secret_values_and_secret_text_are_redacted(lines):
    log = structlog.get_logger("portal.test")
    log.warning(
        "ssh failed", host="pl-nat1", api_key="k-123", headers={"Authorization": "Bearer abc"},
        detail="login with password=s3cr3t&user=x, token: t0k3n",
    )  # fmt: skip
    line = lines()[-1]
    assert line["api_key"] == "[redacted]"
    assert line["headers"]["Authorization"] == "[redacted]"
    assert "s3cr3t" not in line["detail"]
    assert "t0k3n" not in line["detail"]
    assert line["host"] == "pl-nat1"
