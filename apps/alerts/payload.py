"""Alertmanager's webhook body (version 4) checked into typed values before anything is written."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

MAX_ALERTS = 5000
MAX_LABELS = 40
FINGERPRINT = re.compile(r"^[0-9a-f]{1,64}$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,99}$")


class AlertPayloadError(ValueError):
    """The body is not an Alertmanager webhook message we accept (the reason says why)."""


@dataclass(frozen=True)
class ReceivedAlert:
    status: str  # "firing" or "resolved"
    alertname: str
    fingerprint: str
    starts_at: dt.datetime
    ends_at: dt.datetime | None
    labels: dict[str, str]
    summary: str


def _time(value: Any, field: str) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        raise AlertPayloadError(f"{field}: not a time")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise AlertPayloadError(f"{field}: not a time ({value[:40]!r})") from exc
    if parsed.tzinfo is None:
        raise AlertPayloadError(f"{field}: no time zone")
    if parsed.year < 2000:  # Alertmanager's "0001-01-01T00:00:00Z": not set
        return None
    return parsed


def _strings(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > MAX_LABELS:
        raise AlertPayloadError(f"{field}: not a map of at most {MAX_LABELS} labels")
    for key, item in value.items():
        if not isinstance(key, str) or not LABEL_NAME.match(key):
            raise AlertPayloadError(f"{field}: bad label name {str(key)[:40]!r}")
        if not isinstance(item, str) or len(item) > 500:
            raise AlertPayloadError(f"{field}.{key}: not a text of at most 500 characters")
    return dict(value)


def _alert(raw: Any, index: int) -> ReceivedAlert:
    where = f"alerts[{index}]"
    if not isinstance(raw, dict):
        raise AlertPayloadError(f"{where}: not an object")
    status = raw.get("status")
    if status not in ("firing", "resolved"):
        raise AlertPayloadError(f"{where}.status: neither firing nor resolved")
    labels = _strings(raw.get("labels"), f"{where}.labels")
    annotations = _strings(raw.get("annotations", {}), f"{where}.annotations")
    if not labels.get("alertname"):
        raise AlertPayloadError(f"{where}.labels: no alertname")
    fingerprint = raw.get("fingerprint")
    if not isinstance(fingerprint, str) or not FINGERPRINT.match(fingerprint):
        raise AlertPayloadError(f"{where}.fingerprint: not a hexadecimal fingerprint")
    starts_at = _time(raw.get("startsAt"), f"{where}.startsAt")
    if starts_at is None:
        raise AlertPayloadError(f"{where}.startsAt: not set")
    ends_at = _time(raw.get("endsAt") or "0001-01-01T00:00:00Z", f"{where}.endsAt")
    return ReceivedAlert(
        status=status,
        alertname=labels["alertname"][:120],
        fingerprint=fingerprint,
        starts_at=starts_at,
        ends_at=ends_at,
        labels=labels,
        summary=annotations.get("summary", ""),
    )


def alerts_parse(body: bytes) -> list[ReceivedAlert]:
    """The alerts of a webhook body; AlertPayloadError naming the first thing that is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AlertPayloadError("not JSON") from exc
    if not isinstance(data, dict) or data.get("version") != "4":
        raise AlertPayloadError("not an Alertmanager webhook message (version 4)")
    alerts = data.get("alerts")
    if not isinstance(alerts, list) or not alerts or len(alerts) > MAX_ALERTS:
        raise AlertPayloadError(f"alerts: not a list of 1 to {MAX_ALERTS} alerts")
    return [_alert(raw, i) for i, raw in enumerate(alerts)]
