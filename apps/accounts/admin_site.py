"""The admin site: a user who needs a second factor has it verified before any admin page."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.accounts.twofactor import second_factor_satisfied


class PortalAdminSite(admin.AdminSite):
    """Django's admin, closed to sessions that still owe their second factor.

    SecondFactorMiddleware already sends such sessions to the code page; this keeps the admin
    closed even if a URL were ever left out of the middleware.
    """

    def has_permission(self, request: HttpRequest) -> bool:
        return super().has_permission(request) and second_factor_satisfied(request)
