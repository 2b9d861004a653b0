"""Refusals of the member services."""

from __future__ import annotations

from apps.core.errors import NetworkError


class MemberStateError(NetworkError):
    """The action does not fit the membership's status."""
