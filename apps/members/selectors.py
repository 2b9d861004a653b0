"""Reads for the members app."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from apps.accounts.roles import STAFF_ROLES, has_role

User = get_user_model()


def person_search(*, actor: Any, query: str, limit: int = 25) -> QuerySet[Any]:
    """Staff search for people by username, name or e-mail (members extend this with rooms)."""
    if not has_role(actor, *STAFF_ROLES):
        return User.objects.none()
    query = query.strip()
    if not query:
        return User.objects.none()
    condition = Q()
    for term in query.split():
        condition &= (
            Q(username__icontains=term)
            | Q(first_name__icontains=term)
            | Q(last_name__icontains=term)
            | Q(email__icontains=term)
        )
    return User.objects.filter(condition).order_by("last_name", "first_name", "username")[:limit]
