"""System checks of the portal's own (`manage.py check --deploy`, and `manage.py preflight`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

from apps.infra.errors import PLACEHOLDER_SECRET_KEY

KEY_HINT = (
    "Put a key of your own into /etc/portal/portal.env, e.g. the output of "
    "`python3 -c 'import secrets; print(secrets.token_urlsafe(50))'`, and restart the portal."
)


def secret_key_problems() -> list[Error]:
    """The env example's placeholder SECRET_KEY is public: sessions and tokens signed with it
    could be forged by anyone who read the repository."""
    if settings.SECRET_KEY.strip() != PLACEHOLDER_SECRET_KEY:
        return []
    return [
        Error(
            "SECRET_KEY is still the placeholder from deploy/portal.env.example; anyone who "
            "read that file could forge sessions.",
            hint=KEY_HINT,
            id="portal.E001",
        )
    ]


@register(Tags.security, deploy=True)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return secret_key_problems()
