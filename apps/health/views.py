"""The system status page: are the Celery worker and beat alive?"""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View

from apps.accounts.roles import Role, RoleRequiredMixin
from apps.core.htmx import htmx_partial
from apps.health.heartbeat import celery_status


class SystemStatusView(RoleRequiredMixin, View):
    """Admins: background processes at a glance, refreshed every few seconds."""

    required_roles = (Role.ADMIN,)

    def get(self, request: HttpRequest) -> HttpResponse:
        template = "health/system_status.html"
        if htmx_partial(request):
            template += "#celery-status"
        context = {"status": celery_status(), "interval": settings.PORTAL_HEARTBEAT_INTERVAL}
        return render(request, template, context)
