"""Roles are Django groups; every view and API endpoint checks them on the server."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404, HttpRequest, HttpResponseBase
from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import BasePermission


class Role(models.TextChoices):
    """The roles; admin may do everything the others may."""

    MEMBER = "member", _("Member")
    VOLUNTEER = "volunteer", _("Volunteer")
    SUPPORT = "support", _("Support")
    ADMIN = "admin", _("Admin")
    # Who may ask "who had this address then?" (abuse complaints, legal requests); admins may.
    ABUSE = "abuse", _("Abuse desk")


STAFF_ROLES = (Role.VOLUNTEER, Role.SUPPORT, Role.ADMIN)


def user_roles(user: Any) -> frozenset[str]:
    """The role names of `user` (cached on the instance for the request)."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    cached = getattr(user, "_portal_roles", None)
    if cached is None:
        if user.is_superuser:
            cached = frozenset(Role.values)
        else:
            cached = frozenset(user.groups.values_list("name", flat=True)) & set(Role.values)
        user._portal_roles = cached
    return cached


def has_role(user: Any, *roles: str) -> bool:
    """True when `user` holds one of `roles`; admins hold every role."""
    held = user_roles(user)
    return Role.ADMIN in held or bool(held.intersection(roles))


class RoleRequiredMixin(LoginRequiredMixin):
    """Views: log in first, then 403 unless the user holds one of `required_roles`."""

    required_roles: tuple[str, ...] = ()

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.user.is_authenticated and not has_role(request.user, *self.required_roles):
            raise PermissionDenied(_("Your role does not allow this page."))
        return super().dispatch(request, *args, **kwargs)


class StaffRequiredMixin(RoleRequiredMixin):
    """Volunteers, support staff and admins."""

    required_roles = STAFF_ROLES


class StaffOr404Mixin(LoginRequiredMixin):
    """Staff tools about one member: log in first, then 404 for anyone but staff, as for any
    object that is not theirs (a 403 would tell a resident that the member exists)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.user.is_authenticated and not has_role(request.user, *STAFF_ROLES):
            raise Http404
        return super().dispatch(request, *args, **kwargs)


def role_permission(*roles: str) -> type[BasePermission]:
    """A DRF permission class that admits authenticated users holding one of `roles`."""

    class HasRole(BasePermission):
        message = _("Your role does not allow this request.")

        def has_permission(self, request: Any, view: Any) -> bool:
            return bool(request.user and has_role(request.user, *roles))

    HasRole.__name__ = f"HasRole_{'_'.join(roles)}"
    return HasRole


IsStaffRole = role_permission(*STAFF_ROLES)
IsAdminRole = role_permission(Role.ADMIN)
IsAbuseRole = role_permission(Role.ABUSE)
