"""One log format for web, Celery workers, beat and the mail listener (structlog over logging).

`LOGGING` (built by `logging_config`) routes every stdlib record (Django, Celery, axes, our
`logging.getLogger` users) and every structlog event through the same processors:

* JSON lines in production (``DEBUG=0``), a readable console line in development;
  ``LOG_FORMAT=json|console`` overrides, ``LOG_LEVEL`` sets the level;
* each line carries ``request_id`` (web: `RequestIdMiddleware`) or ``task_id`` and ``task``
  (Celery: the signals below) when there is one;
* values under secret-looking keys and ``password=…``-style text in messages are replaced by
  ``[redacted]`` before anything is written.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

import structlog

SECRET_KEY_RE = re.compile(
    r"pass(word|wd)?|secret|token|authori[sz]ation|cookie|api[_-]?key|private[_-]?key|csrf",
    re.IGNORECASE,
)
SECRET_TEXT_RE = re.compile(
    r"(?P<key>\b(?:pass(?:word|wd)?|secret|token|api[_-]?key)\b\s*[=:]\s*)(?P<value>[^\s&,;'\"]+)",
    re.IGNORECASE,
)
REDACTED = "[redacted]"
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._-]{8,64}")


def _redact_value(key: str, value: Any) -> Any:
    if SECRET_KEY_RE.search(key):
        return REDACTED
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, str):
        return SECRET_TEXT_RE.sub(lambda m: m.group("key") + REDACTED, value)
    return value


def redact(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: no secret reaches a log line."""
    return {key: _redact_value(key, value) for key, value in event.items()}


def _shared_processors() -> list[Callable[..., Any]]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
        structlog.processors.format_exc_info,
        redact,
    ]


def logging_config(*, json: bool, level: str) -> dict[str, Any]:
    """The `LOGGING` dict and the structlog set-up it needs (structlog is configured here)."""
    level = level.upper() if level.upper() in logging.getLevelNamesMapping() else "INFO"
    renderer = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "portal": {
                "()": structlog.stdlib.ProcessorFormatter,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    renderer,
                ],
                "foreign_pre_chain": _shared_processors(),
            }
        },
        "filters": {"require_debug_false": {"()": "django.utils.log.RequireDebugFalse"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "portal"},
            # Errors reach a person (apps/infra/errors.py): failed tasks go to ADMINS, as 500s do
            # through Django's own "django" logger (DEFAULT_LOGGING, kept beside this).
            "mail_admins": {
                "level": "ERROR",
                "class": "django.utils.log.AdminEmailHandler",
                "filters": ["require_debug_false"],
            },
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "celery.app.trace": {"handlers": ["mail_admins"], "level": "ERROR", "propagate": True},
            "axes": {"level": "WARNING"},
            "asyncssh": {"level": "WARNING"},
            # aiosmtpd (the mail listener) logs every connection's steps at INFO from its own
            # thread; the handler logs what matters. (In tests those lines came after pytest
            # had closed the capture they were meant for: "I/O operation on closed file".)
            "mail.log": {"level": "WARNING"},
            # Celery adds its own handlers unless told otherwise (worker_hijack_root_logger).
            "celery": {"level": level},
        },
    }


class RequestIdMiddleware:
    """Every log line of a request carries its id (the proxy's X-Request-ID when it sends a sane
    one, else a new one); the response says which."""

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        given = request.headers.get("X-Request-ID", "")
        request_id = given if REQUEST_ID_RE.fullmatch(given) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            response = self.get_response(request)
        finally:
            structlog.contextvars.clear_contextvars()
        response["X-Request-ID"] = request_id
        return response


def bind_celery_task_ids() -> None:
    """Celery: each task's log lines carry its id and name."""
    from celery.signals import task_postrun, task_prerun

    @task_prerun.connect(weak=False)
    def _bind(task_id: str | None = None, task: Any = None, **_: Any) -> None:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(task_id=task_id, task=getattr(task, "name", None))

    @task_postrun.connect(weak=False)
    def _clear(**_: Any) -> None:
        structlog.contextvars.clear_contextvars()
