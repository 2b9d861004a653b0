"""The landing page: it belongs to no single app, so it stands on the top floor."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from apps.accounts.roles import STAFF_ROLES, has_role


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to the page it works on: staff to office hours, members to their account."""
    if has_role(request.user, *STAFF_ROLES):
        return redirect("members:office_hours")
    return redirect("members:dashboard")
