"""The public status page's data, kept in the cache so the page never waits on the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.utils import timezone

STATUS_KEY = "tickets:status:data"
STALE_KEY = "tickets:status:data:stale"
HTML_KEY = "tickets:status:html:{language}"
FRESH_SECONDS = 30
HISTORY_DAYS = 14


def _incident_dict(incident: Any) -> dict[str, Any]:
    return {
        "id": incident.pk,
        "title": incident.title,
        "severity": incident.severity,
        "severity_label": str(incident.get_severity_display()),
        "affected": list(incident.affected),
        "started_at": incident.started_at,
        "ended_at": incident.ended_at,
        "updates": [
            {
                "phase": u.phase,
                "phase_label": str(u.get_phase_display()),
                "body": u.body,
                "created_at": u.created_at,
            }
            for u in incident.updates.all()
        ],
    }


def status_data_build() -> dict[str, Any]:
    """Current and recent public incidents, as plain data (picklable, no lazy querysets)."""
    from apps.tickets.models import Incident

    now = timezone.now()
    public = Incident.objects.filter(public=True).prefetch_related("updates")
    current = [_incident_dict(i) for i in public.filter(ended_at__isnull=True, started_at__lte=now)]
    history = [
        _incident_dict(i)
        for i in public.filter(ended_at__gte=now - timedelta(days=HISTORY_DAYS)).order_by(
            "-ended_at"
        )[:20]
    ]
    return {"current": current, "history": history, "built_at": now}


def status_data() -> tuple[dict[str, Any], bool]:
    """(data, stale): fresh from the cache, rebuilt when missing, or the last good copy when
    the database does not answer."""
    data = cache.get(STATUS_KEY)
    if data is not None:
        return data, False
    try:
        data = status_data_build()
    except Exception:
        stale = cache.get(STALE_KEY)
        if stale is None:
            raise
        return stale, True
    cache.set_many({STATUS_KEY: data}, FRESH_SECONDS)
    cache.set(STALE_KEY, data, None)
    return data, False


def status_cache_refresh() -> None:
    """Rebuild the cached data after an incident changed (services call it on commit), so the
    member banner, which reads only the cache, shows the change at once."""
    status_cache_clear()
    try:
        status_data()
    except Exception:  # the status page rebuilds on its next request
        return


def banner_incidents() -> list[dict[str, Any]]:
    """Current public incidents for the member banner: from the cache only, never the database
    (every page renders the banner; it must not add queries or fail with the database)."""
    try:
        data = cache.get(STATUS_KEY) or cache.get(STALE_KEY)
    except Exception:
        return []
    return list(data["current"]) if data else []


def status_cache_clear() -> None:
    """Drop the cached data and pages after an incident changed (services call it on commit)."""
    from django.conf import settings

    cache.delete_many(
        [STATUS_KEY] + [HTML_KEY.format(language=code) for code, _name in settings.LANGUAGES]
    )
