"""Template context: the current user's roles, for navigation."""

from typing import Any

from django.http import HttpRequest

from apps.accounts.roles import STAFF_ROLES, Role, has_role
from apps.accounts.twofactor import second_factor_satisfied


def roles(request: HttpRequest) -> dict[str, Any]:
    """Flags the base template uses to show only the links a role may follow."""
    user = request.user
    return {
        "is_staff_role": has_role(user, *STAFF_ROLES),
        "is_admin_role": has_role(user, Role.ADMIN),
        "is_abuse_role": has_role(user, Role.ABUSE),
        # Logged in with the password, the code still to come: no navigation yet.
        "second_factor_pending": not second_factor_satisfied(request),
    }
