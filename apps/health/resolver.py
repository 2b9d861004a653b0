"""The members' resolver in the health samples: Unbound's figures as a host reports them
(portal-fw health "resolver"), checked into numbers; rates between two samples; warnings."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

# What a sample keeps (the host's stats_noreset totals since Unbound's start or reload).
COUNTERS = ("queries", "cache_hits", "cache_misses", "servfail", "ratelimited")
GAUGES = ("recursion_avg_seconds", "requests_waiting", "up_seconds")
SERVFAIL_WARN_SHARE = 0.05  # of the answers between two samples


def resolver_figures(raw: Any) -> dict[str, Any]:
    """The host's `resolver` answer as stored: numbers only ({} when it runs none)."""
    if not isinstance(raw, dict) or not raw:
        return {}
    if not raw.get("ok"):
        return {"ok": False, "error": str(raw.get("error") or "no answer")[:300]}
    out: dict[str, Any] = {"ok": True}
    for key in COUNTERS:
        value = raw.get(key)
        out[key] = int(value) if isinstance(value, int | float) and value >= 0 else 0
    for key in GAUGES:
        value = raw.get(key)
        out[key] = float(value) if isinstance(value, int | float) and value >= 0 else 0.0
    return out


def resolver_rates(sample: Any, previous: Any) -> dict[str, float] | None:
    """Per second between two samples of one host (None: no resolver, a restart or no pair):
    queries, SERVFAIL and rate-limited queries, and the cache-hit and SERVFAIL shares."""
    now, before = (sample.resolver or {}), (getattr(previous, "resolver", None) or {})
    if not now.get("ok") or not before.get("ok"):
        return None
    seconds = (sample.at - previous.at).total_seconds()
    if seconds <= 0 or any(now[k] < before[k] for k in COUNTERS):
        return None  # Unbound restarted or reloaded in between: its totals began again
    delta = {k: now[k] - before[k] for k in COUNTERS}
    return {
        "queries_per_second": delta["queries"] / seconds,
        "servfail_per_second": delta["servfail"] / seconds,
        "ratelimited_per_second": delta["ratelimited"] / seconds,
        "cache_hit_share": delta["cache_hits"] / delta["queries"] if delta["queries"] else 0.0,
        "servfail_share": delta["servfail"] / delta["queries"] if delta["queries"] else 0.0,
    }


def resolver_warnings(sample: Any, previous: Any = None) -> list[tuple[str, str]]:
    """(code, message) pairs: the resolver does not answer, or its SERVFAIL share jumped."""
    figures = sample.resolver or {}
    if not figures:
        return []
    if not figures.get("ok"):
        return [
            (
                "resolver-down",
                _("The members' resolver does not answer: %(error)s")
                % {"error": figures.get("error", "")},
            )
        ]
    rates = resolver_rates(sample, previous) if previous is not None else None
    if rates and rates["queries_per_second"] >= 1 and rates["servfail_share"] > SERVFAIL_WARN_SHARE:
        return [
            (
                "resolver-servfail",
                _("The members' resolver answers %(pct)d%% of queries with SERVFAIL.")
                % {"pct": round(rates["servfail_share"] * 100)},
            )
        ]
    return []
