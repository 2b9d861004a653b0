"""Errors reach a person: every unhandled error is mailed to ADMINS and, when SENTRY_DSN is set,
sent to a Sentry-compatible error tracker (Sentry, GlitchTip, Bugsink...).

`ADMINS` comes from the environment ("Ops <ops@example.org>, oncall@example.org"); Django's
`AdminEmailHandler` (apps/infra/logs.py) mails each 500 and each failed Celery task to them.
`sentry_init` runs once from the settings, so web, workers, beat and the mail listener report
alike; without a DSN nothing is initialised and nothing leaves the host. Events carry no
personal data beyond what the traceback holds (no cookies, user, bodies or local variables).
"""

from __future__ import annotations

from email.utils import getaddresses

from django.core.exceptions import ImproperlyConfigured
from django.core.validators import validate_email

__all__ = ["PLACEHOLDER_SECRET_KEY", "admins_parse", "sentry_init"]

# The value deploy/portal.env.example ships; `check --deploy` and `preflight` refuse it.
PLACEHOLDER_SECRET_KEY = "change-me-to-a-long-random-string-of-at-least-fifty-characters"  # noqa: S105


def admins_parse(raw: str, *, name: str = "ADMINS") -> list[tuple[str, str]]:
    """'Ops <ops@example.org>, b@example.org' -> [("Ops", "ops@example.org"), ("", "b@...")];
    ImproperlyConfigured naming the entry that is not an address."""
    admins = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        parsed = getaddresses([item])
        display, address = parsed[0] if len(parsed) == 1 else ("", "")
        try:
            validate_email(address)
        except Exception:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an e-mail address "
                "(use 'Name <address>' or 'address', comma separated)."
            ) from None
        admins.append((display, address))
    return admins


def sentry_init(*, dsn: str, environment: str = "production", release: str = "") -> bool:
    """Start reporting to the error tracker at `dsn`; False (and nothing done) without one."""
    if not dsn:
        return False
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.django import DjangoIntegration

    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        release=release or None,
        integrations=[DjangoIntegration(), CeleryIntegration()],
        # No personal data beyond the traceback: no user, no cookies, no request bodies (a
        # form may hold a password), no local variables, no database query values.
        data_collection={
            "user_info": False,
            "cookies": {"mode": "off"},
            "http_bodies": [],
            "stack_frame_variables": False,
            "database_query_data": False,
            "queues": False,
        },
        traces_sample_rate=0.0,  # errors only: the metrics live in Prometheus
    )
    return True
