"""Alertmanager's webhook messages as it sends them, and a site with two buildings."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest
from django.test import Client

from apps.firewall.models import FirewallHost, Site
from tests.factories import BuildingFactory

SECRET = "alert-test-secret-0123456789"


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def alert(
    alertname: str,
    *,
    status: str = "firing",
    starts_at: dt.datetime | None = None,
    summary: str = "",
    **labels: str,
) -> dict[str, Any]:
    labels = {"alertname": alertname, "severity": "critical", **labels}
    start = starts_at or dt.datetime(2026, 11, 28, 7, 0, tzinfo=dt.UTC)
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": summary or f"{alertname} on {labels}"},
        "startsAt": start.isoformat().replace("+00:00", "Z"),
        "endsAt": "0001-01-01T00:00:00Z"
        if status == "firing"
        else (start + dt.timedelta(minutes=1)).isoformat(),
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint(labels),
    }


def message(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": "{}:{alertname}",
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": "portal",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": list(alerts),
    }


def post(client: Client, body: Any, *, secret: str = SECRET) -> Any:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
    return client.post("/alerts/webhook", data=data, content_type="application/json", **headers)


@pytest.fixture
def webhook_secret(settings):
    settings.PORTAL_ALERTS_WEBHOOK_SECRET = SECRET
    settings.PORTAL_ALERTS_HOLD_DOWN_SECONDS = 120
    return SECRET


@pytest.fixture
def site(db):
    """Site "north" serving two buildings, with its pair fw-n1 / fw-n2; a third building is
    served by another site."""
    north = Site.objects.create(name="north")
    one, two = (
        BuildingFactory(code="N1", name="North 1"),
        BuildingFactory(code="N2", name="North 2"),
    )
    north.buildings.set([one, two])
    BuildingFactory()
    for n in (1, 2):
        FirewallHost.objects.create(name=f"fw-n{n}", address=f"10.255.255.{20 + n}", site=north)
    return north
