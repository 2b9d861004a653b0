"""The members' resolvers in `/metrics`: each host's Unbound figures from its newest health
sample (portal-fw health "resolver", Unbound's stats_noreset; docs/dns.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# sample key -> (metric name without _total, help): totals since Unbound's start or reload (a
# reload begins them again; Prometheus' rate() takes that as a counter reset).
COUNTERS = {
    "queries": ("portal_resolver_queries", "Queries the host's resolver received"),
    "cache_hits": ("portal_resolver_cache_hits", "Queries answered from the resolver's cache"),
    "servfail": ("portal_resolver_servfail", "Answers with SERVFAIL"),
    "ratelimited": (
        "portal_resolver_ratelimited",
        "Queries dropped by the per-client limit (ip-ratelimit)",
    ),
}


def resolver_families(samples: list[tuple[str, Any]]) -> Iterator[GaugeMetricFamily]:
    """(host name, newest sample) pairs -> the resolver metric families."""
    up = GaugeMetricFamily(
        "portal_resolver_up",
        "1 when the host's resolver (Unbound) answered its health check (hosts with one only)",
        labels=["host"],
    )
    recursion = GaugeMetricFamily(
        "portal_resolver_recursion_seconds",
        "Average time of a recursive lookup (cache misses) since the resolver's start",
        labels=["host"],
    )
    counters = {
        key: CounterMetricFamily(name, text, labels=["host"])
        for key, (name, text) in COUNTERS.items()
    }
    for host, sample in samples:
        figures = (sample.resolver or {}) if sample is not None and sample.reachable else {}
        if not figures:
            continue
        up.add_metric([host], 1.0 if figures.get("ok") else 0.0)
        if not figures.get("ok"):
            continue
        recursion.add_metric([host], float(figures.get("recursion_avg_seconds", 0.0)))
        for key, family in counters.items():
            family.add_metric([host], float(figures.get(key, 0)))
    yield up
    yield recursion
    yield from counters.values()
