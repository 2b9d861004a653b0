"""`/metrics` (Prometheus text format) and `/healthz`.

The metrics are read at scrape time from what the portal already stores (a custom collector:
a handful of indexed queries and Redis reads, no counters to keep consistent across processes):
firewall hosts from their newest health sample and push log, pushes, tickets, inbound mail,
queue lengths, worker and beat liveness, DHCP leases. Request latency per view is a
histogram of this process (`RequestLatencyMiddleware`): with several gunicorn workers each
answers for itself, so scrape per process or read it as a sample.

Access: from `PORTAL_METRICS_NETWORKS` (loopback by default) or with
`Authorization: Bearer <PORTAL_METRICS_TOKEN>`; anyone else gets 403.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from apps.core.clientip import client_address
from apps.dhcp.models import Lease
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from apps.health.models import HostHealthSample
from apps.infra.heartbeat import BEAT_KEY, HEARTBEAT_KEY
from apps.infra.redis import redis_client
from apps.tickets.choices import ACTIVE_STATUSES
from apps.tickets.models import InboundMail, Ticket

# conntrack's counters of new connections it refused (apps/health conntrack_warnings reads the same)
CONNTRACK_DROP_KEYS = ("drop", "early_drop", "insert_failed")
REQUEST_LATENCY = Histogram(
    "portal_http_request_seconds",
    "Time to answer a request, by view (this process).",
    ["view", "method"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)


# The methods the portal answers; any other (a client may send "FOO1", "FOO2", ...) is counted
# as "other", so no anonymous client can add label values (time series) without bound.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str | None) -> str:
    """The request's method as a label value from a fixed set."""
    return method if method in KNOWN_METHODS else "other"


class RequestLatencyMiddleware:
    """Times every request by its resolved view name (a bounded set: the URL names)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        view = match.view_name if match is not None and match.view_name else "unresolved"
        REQUEST_LATENCY.labels(view=view[:80], method=method_label(request.method)).observe(
            time.perf_counter() - started
        )
        return response


class PortalCollector:
    """Everything read from the database and Redis at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._hosts()
        yield from self._pushes()
        yield from self._tickets_and_mail()
        yield from self._processes()
        yield from self._dhcp()

    def _hosts(self) -> Iterator[GaugeMetricFamily]:
        reachable = GaugeMetricFamily(
            "portal_firewall_host_reachable", "1 when the newest health sample reached the host",
            labels=["host", "site"],
        )  # fmt: skip
        behind = GaugeMetricFamily(
            "portal_firewall_host_version_behind",
            "1 when the host does not run its newest compiled version (pinned hosts: 0)",
            labels=["host", "site"],
        )
        drift = GaugeMetricFamily(
            "portal_firewall_host_drift_parts",
            "Parts of what the host runs that differ from what it confirmed (drift by content)",
            labels=["host", "site"],
        )
        ct = GaugeMetricFamily(
            "portal_firewall_conntrack_entries", "Connection-tracking entries", labels=["host"]
        )
        ct_max = GaugeMetricFamily(
            "portal_firewall_conntrack_max", "Connection-tracking table size", labels=["host"]
        )
        softirq = GaugeMetricFamily(
            "portal_firewall_softirq_share",
            "Share of a CPU's time in softirq in the last sample",
            labels=["host", "cpu"],
        )
        age = GaugeMetricFamily(
            "portal_firewall_health_age_seconds", "Age of the newest health sample",
            labels=["host"],
        )  # fmt: skip
        vrrp = GaugeMetricFamily(
            "portal_firewall_vrrp_primary",
            "1 when the host holds the family's virtual addresses (VRRP MASTER), 0 otherwise",
            labels=["host", "site", "family"],
        )
        daemon_up = GaugeMetricFamily(
            "portal_firewall_ha_daemon_up",
            "1 when keepalived / conntrackd runs on the host (hosts of a pair only)",
            labels=["host", "daemon"],
        )
        sync_lost = GaugeMetricFamily(
            "portal_firewall_sync_lost_messages",
            "conntrackd's lost sync messages since it started (rising: the sync stalls)",
            labels=["host"],
        )
        drops = GaugeMetricFamily(
            "portal_firewall_conntrack_drops",
            "New connections conntrack refused since the host booted (drop + early_drop + "
            "insert_failed; rising: the table is full or flooded)",
            labels=["host"],
        )
        fault = GaugeMetricFamily(
            "portal_firewall_vrrp_fault",
            "1 when the host's VRRP instance of the family is in FAULT (it gave up its role: a "
            "tracked link is down), 0 otherwise",
            labels=["host", "site", "family"],
        )
        dhcp_up = GaugeMetricFamily(
            "portal_firewall_dhcp_up",
            "1 when the host's Kea answers (its control socket, served by the loop that answers "
            "clients, and its DHCP sockets open); DHCP hosts that answered the health check only",
            labels=["host", "site"],
        )
        dhcp_requests = GaugeMetricFamily(
            "portal_firewall_dhcp_requests",
            "DHCPDISCOVER + DHCPREQUEST Kea received since it started",
            labels=["host", "site"],
        )
        dhcp_answers = GaugeMetricFamily(
            "portal_firewall_dhcp_answers",
            "DHCPOFFER + DHCPACK + DHCPNAK Kea sent since it started",
            labels=["host", "site"],
        )
        offloaded = GaugeMetricFamily(
            "portal_firewall_offloaded_flows",
            "Conntrack entries on the fast path ([OFFLOAD]: forwarded by the flowtable) at the "
            "newest sample",
            labels=["host"],
        )
        now = timezone.now()
        for host in FirewallHost.objects.filter(enabled=True).select_related("site"):
            site = host.site.name if host.site_id else ""
            sample = HostHealthSample.objects.filter(host=host).order_by("-at").first()
            reachable.add_metric([host.name, site], 1.0 if sample and sample.reachable else 0.0)
            newest = (
                RuleSetVersion.objects.filter(host=host)
                .values_list("content_hash", flat=True)
                .first()
            )
            lagging = not host.is_pinned and newest is not None and not host.runs(newest)
            behind.add_metric([host.name, site], 1.0 if lagging else 0.0)
            drift.add_metric([host.name, site], float(len(host.drift or [])))
            if sample is None:
                continue
            age.add_metric([host.name], (now - sample.at).total_seconds())
            if sample.conntrack_count is not None:
                ct.add_metric([host.name], float(sample.conntrack_count))
            if sample.conntrack_max:
                ct_max.add_metric([host.name], float(sample.conntrack_max))
            stats = sample.conntrack_stats or {}
            if any(key in stats for key in CONNTRACK_DROP_KEYS):
                drops.add_metric(
                    [host.name], float(sum(stats.get(k, 0) for k in CONNTRACK_DROP_KEYS))
                )
            if isinstance(stats.get("offloaded"), int):
                offloaded.add_metric([host.name], float(stats["offloaded"]))
            for cpu, share in enumerate(sample.softirq_per_cpu or []):
                softirq.add_metric([host.name, str(cpu)], float(share))
            ha = sample.ha or {} if sample.reachable else {}
            for family, info in sorted((ha.get("instances") or {}).items()):
                state = (info or {}).get("state")
                vrrp.add_metric([host.name, site, family], 1.0 if state == "MASTER" else 0.0)
                fault.add_metric([host.name, site, family], 1.0 if state == "FAULT" else 0.0)
            dhcp = sample.dhcp or {} if sample.reachable and host.serves_dhcp else {}
            if dhcp:
                dhcp_up.add_metric([host.name, site], 1.0 if dhcp.get("answering") else 0.0)
                for family, key in ((dhcp_requests, "requests"), (dhcp_answers, "answers")):
                    if key in dhcp:
                        family.add_metric([host.name, site], float(dhcp[key]))
            for daemon in ("keepalived", "conntrackd"):
                if daemon in ha:
                    running = (ha.get(daemon) or {}).get("running")
                    daemon_up.add_metric([host.name, daemon], 1.0 if running else 0.0)
            lost = ((ha.get("conntrackd") or {}).get("stats") or {}).get("lost_messages")
            if lost is not None:
                sync_lost.add_metric([host.name], float(lost))
        yield from (reachable, behind, drift, ct, ct_max, drops, softirq, age, vrrp, daemon_up)
        yield from (sync_lost, offloaded, fault, dhcp_up, dhcp_requests, dhcp_answers)

    def _pushes(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count

        pushes = GaugeMetricFamily(
            "portal_firewall_push_steps_last_hour",
            "Push steps of the last hour by host, step and outcome",
            labels=["host", "step", "ok"],
        )
        since = timezone.now() - timedelta(hours=1)
        rows = (
            PushLogEntry.objects.filter(at__gte=since)
            .values_list("host__name", "step", "ok")
            .annotate(n=Count("id"))
        )
        for host, step, ok, n in rows:
            pushes.add_metric([host, step, "true" if ok else "false"], float(n))
        yield pushes

    def _tickets_and_mail(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count

        tickets = GaugeMetricFamily(
            "portal_tickets", "Tickets by status (open = new, open and waiting)", labels=["status"]
        )
        for status, n in Ticket.objects.values_list("status").annotate(n=Count("id")):
            tickets.add_metric([status], float(n))
        active = GaugeMetricFamily("portal_tickets_active", "Tickets that need an answer")
        active.add_metric([], float(Ticket.objects.filter(status__in=ACTIVE_STATUSES).count()))
        mail = GaugeMetricFamily(
            "portal_inbound_mail_last_day", "Inbound mail of the last 24 h by outcome",
            labels=["status"],
        )  # fmt: skip
        since = timezone.now() - timedelta(days=1)
        for status, n in (
            InboundMail.objects.filter(received_at__gte=since)
            .values_list("status")
            .annotate(n=Count("id"))
        ):
            mail.add_metric([status], float(n))
        quarantined = GaugeMetricFamily(
            "portal_inbound_mail_quarantined", "Inbound mail waiting in quarantine"
        )
        quarantined.add_metric([], float(InboundMail.objects.filter(status="quarantined").count()))
        yield from (tickets, active, mail, quarantined)

    def _processes(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("portal_redis_up", "1 when Redis answered this scrape")
        queue = GaugeMetricFamily(
            "portal_queue_length", "Tasks waiting in a Celery queue", labels=["queue"]
        )
        beat = GaugeMetricFamily("portal_beat_age_seconds", "Seconds since beat last ticked")
        worker = GaugeMetricFamily(
            "portal_worker_heartbeat_age_seconds",
            "Seconds since a worker last ran the heartbeat task beat schedules",
        )
        try:
            client = redis_client()
            for name in ("celery", "firewall", "mail"):
                queue.add_metric([name], float(client.llen(name)))
            now = timezone.now()
            for family, raw in (
                (beat, client.get(BEAT_KEY)),
                (worker, client.hget(HEARTBEAT_KEY, "at")),
            ):
                if raw:
                    seen = timezone.datetime.fromisoformat(
                        raw.decode() if isinstance(raw, bytes) else raw
                    )
                    family.add_metric([], (now - seen).total_seconds())
            up.add_metric([], 1.0)
        except Exception:
            up.add_metric([], 0.0)
        yield from (up, queue, beat, worker)

    def _dhcp(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count

        leases = GaugeMetricFamily(
            "portal_dhcp_leases_active",
            "Leases the hosts reported that have not ended, by host and kind",
            labels=["host", "kind"],
        )
        for host, registration, n in (
            Lease.objects.filter(ends__gte=timezone.now())
            .values_list("host_name", "registration")
            .annotate(n=Count("id"))
        ):
            leases.add_metric([host, "registration" if registration else "registered"], float(n))
        yield leases


def _allowed(request: HttpRequest) -> bool:
    token = settings.PORTAL_METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[7:].strip().encode(), token.encode())
    address = client_address(request)
    if address is None:
        return False
    return any(
        address in ipaddress.ip_network(net, strict=False)
        for net in settings.PORTAL_METRICS_NETWORKS
    )


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format: this process's request latencies and the portal's state."""
    if not _allowed(request):
        return HttpResponse(
            "metrics: not from an allowed network and no valid bearer token\n",
            status=403,
            content_type="text/plain",
        )
    registry = CollectorRegistry()
    registry.register(PortalCollector())
    body = generate_latest(registry) + generate_latest()  # portal state + this process
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def healthz_view(request: HttpRequest) -> JsonResponse:
    """For load balancers and monitors: PostgreSQL, Redis and the worker heartbeat."""

    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"down: {type(exc).__name__}"
    try:
        raw = redis_client().hget(HEARTBEAT_KEY, "at")
        checks["redis"] = "ok"
        if raw:
            seen = timezone.datetime.fromisoformat(raw.decode() if isinstance(raw, bytes) else raw)
            fresh = (timezone.now() - seen).total_seconds() <= max(
                3 * settings.PORTAL_HEARTBEAT_INTERVAL, 15
            )
            checks["worker"] = "ok" if fresh else "stale"
        else:
            checks["worker"] = "never seen"
    except Exception as exc:
        checks["redis"] = f"down: {type(exc).__name__}"
        checks["worker"] = "unknown"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"ok": healthy, **checks}, status=200 if healthy else 503)
