"""The public status page's data, kept in the cache so the page never waits on the database."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone, translation

from apps.health.selectors import (
    failed_over_families,
    firewall_host_states,
    public_problem_count,
)
from apps.tickets.choices import IncidentPhase, IncidentSeverity
from apps.tickets.models import Incident

STATUS_KEY = "tickets:status:data"
STALE_KEY = "tickets:status:data:stale"
HTML_KEY = "tickets:status:html:{language}"
FRESH_SECONDS = 30
HISTORY_DAYS = 14
# Each web process keeps the rendered page this long, so most requests need no Redis round trip
# at all; a change made by another process shows there within this time (this process at once).
LOCAL_SECONDS = 1.0
_local_html: dict[str, tuple[float, str]] = {}


class BilingualText(str):
    """A text stored in English and German (incidents opened by an alert): renders in the
    reader's language, as the lazy labels do; a plain string where no German was written."""

    de: str

    def __new__(cls, en: str, de: str = "") -> BilingualText:
        text = super().__new__(cls, en)
        text.de = de
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (BilingualText, (str.__str__(self), self.de))

    def __str__(self) -> str:
        if self.de and (translation.get_language() or "").startswith("de"):
            return self.de
        return str.__str__(self)


def _incident_dict(incident: Any) -> dict[str, Any]:
    return {
        "id": incident.pk,
        "title": BilingualText(incident.title, incident.title_de),
        "severity": incident.severity,
        # Lazy labels: rendered in each reader's language (the HTML is cached per language).
        "severity_label": IncidentSeverity(incident.severity).label,
        "buildings": [b.name or b.code for b in incident.buildings.all()],
        "affected": list(incident.affected),
        "started_at": incident.started_at,
        "ended_at": incident.ended_at,
        "updates": [
            {
                "phase": u.phase,
                "phase_label": IncidentPhase(u.phase).label,
                "body": BilingualText(u.body, u.body_de),
                "created_at": u.created_at,
            }
            for u in incident.updates.all()
        ],
    }


def status_data_build() -> dict[str, Any]:
    """Current and recent public incidents, as plain data (picklable, no lazy querysets)."""
    now = timezone.now()
    public = Incident.objects.filter(public=True).prefetch_related("updates", "buildings")
    current = [_incident_dict(i) for i in public.filter(ended_at__isnull=True, started_at__lte=now)]
    history = [
        _incident_dict(i)
        for i in public.filter(ended_at__gte=now - timedelta(days=HISTORY_DAYS)).order_by(
            "-ended_at"
        )[:20]
    ]
    return {
        "current": current,
        "history": history,
        "firewalls": _firewall_summary(),
        "built_at": now,
    }


def _firewall_summary() -> dict[str, Any] | None:
    """How many firewalls report healthy, from the health app (None when that is unavailable:
    the status page must render whatever state the health work is in)."""
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves the rest usable
            states = firewall_host_states()
    except Exception:
        return None
    degraded = public_problem_count(states)
    return {
        "total": len(states),
        "healthy": len(states) - degraded,
        "degraded": degraded,
        "on_backup": failed_over_families(states),
    }


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


# Sent after the cached status data was rebuilt from a change; the off-site publisher listens
# (connected in TicketsConfig.ready), so this module does not import the one that reads it.
status_changed = Signal()


def status_cache_refresh() -> None:
    """Rebuild the cached data after an incident changed (services call it on commit), so the
    member banner, which reads only the cache, shows the change at once."""
    status_cache_clear()
    try:
        status_data()
    except Exception:  # the status page rebuilds on its next request
        return
    status_changed.send(sender=None)  # the off-site copy follows (apps/tickets/publish.py)


def public_face_refresh(**_kwargs: object) -> None:
    """A host's public face changed (apps/health/signals.py, sent on commit): rebuild now."""
    status_cache_refresh()


def banner_incidents() -> list[dict[str, Any]]:
    """Current public incidents for the member banner: from the cache only, never the database
    (every page renders the banner; it must not add queries or fail with the database)."""
    try:
        data = cache.get(STATUS_KEY) or cache.get(STALE_KEY)
    except Exception:
        return []
    return list(data["current"]) if data else []


def status_html_get(language: str) -> str | None:
    """The rendered page for `language`: from this process's copy (under LOCAL_SECONDS old),
    else from the cache (one round trip); None when it has to be rendered."""
    now = time.monotonic()
    local = _local_html.get(language)
    if local is not None and now - local[0] < LOCAL_SECONDS:
        return local[1]
    html = cache.get(HTML_KEY.format(language=language))
    if html is not None:
        _local_html[language] = (now, html)
    return html


def status_html_set(language: str, html: str) -> None:
    """Keep a freshly rendered page in the cache and in this process."""
    cache.set(HTML_KEY.format(language=language), html, FRESH_SECONDS)
    _local_html[language] = (time.monotonic(), html)


def status_html_forget_local() -> None:
    """Drop this process's copies of the page (as if LOCAL_SECONDS had passed)."""
    _local_html.clear()


def status_cache_clear() -> None:
    """Drop the cached data and pages after an incident changed (services call it on commit)."""
    _local_html.clear()
    cache.delete_many(
        [STATUS_KEY] + [HTML_KEY.format(language=code) for code, _name in settings.LANGUAGES]
    )
