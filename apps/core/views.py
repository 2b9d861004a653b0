"""Entry points that belong to no single app."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from apps.accounts.roles import STAFF_ROLES, has_role


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to the page it works on: staff to office hours, members to their account."""
    if has_role(request.user, *STAFF_ROLES):
        return redirect("members:office_hours")
    return redirect("members:dashboard")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the process answers and reaches its database."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"status": "database unavailable"}, status=503)
    return JsonResponse({"status": "ok"})
