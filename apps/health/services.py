"""Collect firewall health over SSH; detect drift between what a host runs and what it should."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from datetime import timedelta

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.order import host_drift_repair
from apps.firewall.pipeline import LockBusy, changes_waiting, firewall_change_request, site_lock
from apps.firewall.transport import FirewallUnreachable, session_for
from apps.health.models import HostHealthSample
from apps.health.resolver import resolver_figures, resolver_warnings
from apps.health.signals import public_face_changed

log = structlog.get_logger(__name__)


def _digest_args(host: FirewallHost) -> tuple[str, ...]:
    """Read the content digest back with this collection unless the last one is younger than
    PORTAL_HEALTH_DIGEST_INTERVAL (a full read costs about 0.8 s at 20,000 members and 6.5 s at
    100,000 on the host; pushes read back what they change anyway)."""
    checked = host.digest_checked_at
    interval = settings.PORTAL_HEALTH_DIGEST_INTERVAL
    if checked is not None and (timezone.now() - checked).total_seconds() < interval:
        return ("--no-digest",)
    return ()


def host_health_collect(*, host: FirewallHost) -> HostHealthSample:
    """Read one host's health (one SSH session, the helper's `health` verb) and store it. The
    sample's time is when it was asked for, so a push confirmed while the answer was on its way
    is not mistaken for drift (`host_drifted`)."""
    asked = timezone.now()
    started = time.monotonic()
    try:
        with session_for(host) as session:
            reply = session.call("health", "--sample-ms", "200", *_digest_args(host), timeout=60)
    except FirewallUnreachable as exc:
        return _store(host, HostHealthSample(host=host, at=asked, reachable=False, error=str(exc)))
    latency = (time.monotonic() - started) * 1000
    if not reply.ok:
        return _store(
            host,
            HostHealthSample(
                host=host, at=asked, reachable=True, latency_ms=latency, error=reply.message
            ),
        )
    data = reply.data
    conntrack = data.get("conntrack") or {}
    softirq = data.get("softirq") or {}
    sample = HostHealthSample(
        host=host,
        at=asked,
        reachable=True,
        latency_ms=round(latency, 1),
        loaded_version=str(data.get("version") or "")[:128],
        conntrack_count=conntrack.get("count"),
        conntrack_max=conntrack.get("max"),
        softirq_max_share=softirq.get("max_share"),
        softirq_per_cpu=[c.get("softirq", 0) for c in softirq.get("per_cpu", [])],
        load1=(data.get("loadavg") or [None])[0],
        interfaces=data.get("interfaces") or {},
        digest=str((data.get("digest") or {}).get("total") or "")[:64],
        ha=data.get("ha") or {},
        conntrack_stats=conntrack_stats(conntrack),
        quota_hits=(conntrack.get("quota_hits") or [])[:50],
        resolver=resolver_figures(data.get("resolver")),
        dhcp=_dhcp_state(data.get("dhcp")),
    )
    # A push may have confirmed while the answer was on its way: compare with what is stored.
    host.refresh_from_db(fields=["push_status", "applied_at", "confirmed_digest", "drift"])
    if host.applied_at is None or host.applied_at <= asked:
        host_digest_compare(host=host, digest=data.get("digest") or {})
    return _store(host, sample)


def conntrack_stats(conntrack: dict) -> dict:
    """The sample's conntrack figures: the kernel's statistics and, from an agent that counts
    them, the flows on the fast path ("offloaded": entries conntrack marks [OFFLOAD])."""
    stats = dict(conntrack.get("stats") or {})
    if isinstance(conntrack.get("offloaded"), int):
        stats["offloaded"] = conntrack["offloaded"]
    return stats


def _dhcp_state(raw: object) -> dict:
    """The host's Kea answer, typed: answering (bool), requests/answers (counts), error."""
    if not isinstance(raw, dict):
        return {}
    state: dict = {"answering": raw.get("answering") is True}
    for key in ("requests", "answers"):
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            state[key] = value
    if raw.get("error"):
        state["error"] = str(raw["error"])[:300]
    if raw.get("reloading") is True:
        state["reloading"] = True
    config = raw.get("config")
    if isinstance(config, dict):  # the Kea path (deploy/firewall/portal_fw/deferred.py)
        state["config"] = {
            "state": str(config.get("state") or "")[:20],
            "pending": config.get("pending") is True,
            "at": str(config.get("at") or "")[:40],
            "seconds": config.get("seconds") if isinstance(config.get("seconds"), float) else None,
            "error": str(config.get("error") or "")[:300],
        }
    return state


def host_digest_compare(*, host: FirewallHost, digest: dict) -> list[str]:
    """Compare what the host reads back now with what it read back right after it applied its
    confirmed bundle; record and return the parts that differ (drift by content)."""
    expected = (host.confirmed_digest or {}).get("parts") or {}
    got = digest.get("parts") or {}
    if not expected or not digest.get("total") or host.push_status != PushStatus.APPLIED:
        return []
    differs = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    FirewallHost.objects.filter(pk=host.pk).update(drift=differs, digest_checked_at=timezone.now())
    host.drift, host.digest_checked_at = differs, timezone.now()
    return differs


def _public_face(sample: HostHealthSample | None) -> tuple:
    """What of a sample the public status page shows: reachable, and each family's VRRP state."""
    if sample is None:
        return ()
    instances = (sample.ha or {}).get("instances") or {}
    return sample.reachable, tuple(
        sorted((k, (v or {}).get("state")) for k, v in instances.items())
    )


@transaction.atomic
def _store(host: FirewallHost, sample: HostHealthSample) -> HostHealthSample:
    previous = HostHealthSample.objects.filter(host=host).order_by("-pk").first()
    sample.save()
    if _public_face(previous) != _public_face(sample):
        # A failover or a host lost: the status page says so now, not when its cache expires.
        transaction.on_commit(lambda: public_face_changed.send(sender=HostHealthSample))
    keep = settings.PORTAL_HEALTH_SAMPLES_KEPT
    stale = HostHealthSample.objects.filter(host=host).values_list("pk", flat=True)[keep:]
    HostHealthSample.objects.filter(pk__in=list(stale)).delete()
    return sample


@dataclass(frozen=True)
class HealthWarning:
    """A threshold crossed on a host, for the status screens."""

    code: str
    message: str


def host_warnings(*, host: FirewallHost, sample: HostHealthSample | None) -> list[HealthWarning]:
    """What staff should look at on `host`, judged from its newest sample."""
    if sample is None:
        return [HealthWarning("no-data", _("No health data yet."))]
    if not sample.reachable:
        return [
            HealthWarning("unreachable", _("Not reachable: %(error)s") % {"error": sample.error})
        ]
    found = []
    if sample.error:
        found.append(HealthWarning("health-failed", sample.error))
    ratio = sample.conntrack_ratio
    if ratio is not None and ratio > settings.PORTAL_HEALTH_CONNTRACK_WARN:
        found.append(
            HealthWarning(
                "conntrack",
                _("Connection tracking table %(pct)d%% full.") % {"pct": round(ratio * 100)},
            )
        )
    share = sample.softirq_max_share
    if share is not None and share > settings.PORTAL_HEALTH_SOFTIRQ_WARN:
        others = sorted(sample.softirq_per_cpu or [])[:-1]
        rest = sum(others) / len(others) if others else None
        if rest is not None and share - rest > 0.5:
            # The outage of the field reports: one core saturated, the others idle.
            message = _(
                "One core at %(pct)d%% softirq, the others at %(rest)d%%: a single flow or a loop."
            ) % {"pct": round(share * 100), "rest": round(rest * 100)}
        else:
            message = _("Softirq load %(pct)d%% on one core.") % {"pct": round(share * 100)}
        found.append(HealthWarning("softirq", message))
    found += conntrack_warnings(host=host, sample=sample)
    found += ha_warnings(host=host, sample=sample)
    found += [HealthWarning(code, text) for code, text in resolver_warnings(sample)]
    config = (sample.dhcp or {}).get("config") or {}
    if config.get("state") in ("refused", "not-answering"):
        found.append(
            HealthWarning(
                "dhcp-config",
                _("Kea did not load the newest DHCP configuration (%(state)s): %(error)s")
                % {"state": config["state"], "error": config.get("error") or "?"},
            )
        )
    if host.drift:
        found.append(
            HealthWarning(
                "drift",
                _("Runs something else than it confirmed: %(parts)s.")
                % {"parts": ", ".join(host.drift[:5]) + (" …" if len(host.drift) > 5 else "")},
            )
        )
    elif host_drifted(host=host, sample=sample):
        found.append(
            HealthWarning(
                "drift",
                _("Runs version %(loaded)s, expected %(expected)s.")
                % {
                    "loaded": sample.loaded_version[:12] or "?",
                    "expected": host.applied_checksum[:12],
                },
            )
        )
    return found


def conntrack_warnings(*, host: FirewallHost, sample: HostHealthSample) -> list[HealthWarning]:
    """Connections dropped for lack of room since the previous sample (a full table or a
    flood), and members who hit their conntrack quota in the last hour."""
    found = []
    stats = sample.conntrack_stats or {}
    previous = (
        HostHealthSample.objects.filter(host=host, at__lt=sample.at, reachable=True)
        .exclude(conntrack_stats={})
        .order_by("-at")
        .values_list("conntrack_stats", flat=True)
        .first()
    )
    if previous:
        rising = {
            key: stats[key] - previous[key]
            for key in ("drop", "early_drop", "insert_failed")
            if key in stats and key in previous and stats[key] > previous[key]
        }
        if rising:
            found.append(
                HealthWarning(
                    "conntrack-drops",
                    _("Connection tracking dropping new connections: %(what)s.")
                    % {"what": ", ".join(f"{k} +{v}" for k, v in sorted(rising.items()))},
                )
            )
    if sample.quota_hits:
        found.append(
            HealthWarning(
                "quota",
                _("%(n)s member(s) hit their connection quota in the last hour.")
                % {"n": len(sample.quota_hits)},
            )
        )
    return found


FAMILY_LABELS = {"ipv4": "IPv4", "ipv6": "IPv6"}
# An operator's priority file at this value (or below) puts the instance into FAULT on purpose
# (`lab.sh failover`; workers/ruleset/ha.py: track_file with weight 1).
OPERATOR_FAULT_PRIORITY = -254


def vrrp_roles(sample: HostHealthSample | None) -> dict[str, str]:
    """{"ipv4": "MASTER", ...}: the VRRP state of each instance in `sample` ("" if unknown)."""
    if sample is None or not sample.reachable or not sample.ha:
        return {}
    return {
        name: str((info or {}).get("state") or "")
        for name, info in (sample.ha.get("instances") or {}).items()
        if name in FAMILY_LABELS
    }


TRANSITION_STUCK_AFTER = 60  # seconds; a transition's steps take seconds (docs/ha.md)


def short_duration(seconds: int) -> str:
    """95 s, 12 min, 3 h: what a warning names (the units read the same in German)."""
    if seconds < 600:
        return f"{seconds} s"
    if seconds < 3 * 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def transition_stuck_for(ha: dict, at: dt.datetime) -> int | None:
    """Seconds the notify hook has been running since the newest transition, when that is longer
    than TRANSITION_STUCK_AFTER; None otherwise."""
    if not ha.get("transition_running"):
        return None
    since = []
    for state in (ha.get("instances") or {}).values():
        try:
            since.append(dt.datetime.fromisoformat(str(state.get("since"))))
        except (TypeError, ValueError):
            continue
    if not since:
        return None
    seconds = int((at - max(since)).total_seconds())
    return seconds if seconds > TRANSITION_STUCK_AFTER else None


def ha_warnings(*, host: FirewallHost, sample: HostHealthSample) -> list[HealthWarning]:
    """One host's part of the pair: its daemons and its sync statistics."""
    ha = sample.ha or {}
    if not ha:
        return []
    if ha.get("error"):
        return [
            HealthWarning("ha-unknown", _("Failover state unreadable: %(e)s") % {"e": ha["error"]})
        ]
    found = []
    if not (ha.get("keepalived") or {}).get("running", True):
        found.append(
            HealthWarning(
                "keepalived-down",
                _("keepalived is not running: this host takes no role if its peer fails."),
            )
        )
    conntrackd = ha.get("conntrackd") or {}
    if not conntrackd.get("running", True):
        found.append(
            HealthWarning(
                "conntrackd-down",
                _(
                    "conntrackd is not running: a failover to or from this host drops every "
                    "connection."
                ),
            )
        )
    stuck = transition_stuck_for(ha, sample.at)
    if stuck is not None:
        found.append(
            HealthWarning(
                "transition-stuck",
                _(
                    "The failover hook has been driving conntrackd for %(duration)s after the "
                    "last transition (it takes seconds): its log is in the pair's run directory."
                )
                % {"duration": short_duration(stuck)},
            )
        )
    stats = conntrackd.get("stats") or {}
    previous = (
        HostHealthSample.objects.filter(host=host, at__lt=sample.at)
        .exclude(ha={})
        .order_by("-at")
        .values_list("ha", flat=True)
        .first()
    )
    before = ((previous or {}).get("conntrackd") or {}).get("stats") or {}
    rising = [
        key
        for key in ("lost_messages", "send_errors", "receive_errors", "external_created_failed")
        if key in stats and key in before and stats[key] > before[key]
    ]
    if rising:
        found.append(
            HealthWarning(
                "sync-errors",
                _("State sync errors rising: %(what)s.") % {"what": ", ".join(rising)},
            )
        )
    operator = ha.get("operator_priority") or {}
    for name, state in sorted(vrrp_roles(sample).items()):
        if state != "FAULT":
            continue
        if operator.get(name, 0) <= OPERATOR_FAULT_PRIORITY:
            # The host's priority file says so (portal-ha reports it): a deliberate move.
            message = _(
                "%(family)s: an operator moved the primary role to the other host (priority "
                "failover); this host gives the role back when its priority file is reset."
            )
        else:
            message = _(
                "%(family)s failover instance in FAULT: a tracked link of this host is down, so "
                "it gave up the role."
            )
        found.append(HealthWarning("vrrp-fault", message % {"family": FAMILY_LABELS[name]}))
    return found


def pair_warnings(
    samples: dict[int, HostHealthSample | None], pair: list[FirewallHost]
) -> list[HealthWarning]:
    """What only both hosts together tell: no primary or two primaries for a family, and
    connection counts that diverge (the backup's states are not those of the primary)."""
    roles = [vrrp_roles(samples.get(h.pk)) for h in pair]
    if len(pair) != 2 or not all(roles):
        return []
    found = []
    for name, label in FAMILY_LABELS.items():
        states = [r.get(name) for r in roles]
        if not any(states):
            continue
        masters = sum(1 for s in states if s == "MASTER")
        if masters == 0:
            found.append(
                HealthWarning(
                    "no-primary",
                    _("No primary for %(family)s: its gateway is down.") % {"family": label},
                )
            )
        elif masters == 2:
            found.append(
                HealthWarning(
                    "both-primary",
                    _("Both hosts are primary for %(family)s (split brain: the sync link is cut?).")
                    % {"family": label},
                )
            )
    if any(samples[h.pk].ha.get("transition_running") for h in pair):
        # A host's notify hook is still committing, flushing and refilling its caches: the
        # counts of that moment are not a divergence (the next sample decides).
        return found
    stats = [((samples[h.pk].ha.get("conntrackd") or {}).get("stats") or {}) for h in pair]
    for mine, peer, host, my_roles in (
        (stats[0], stats[1], pair[1], roles[0]),
        (stats[1], stats[0], pair[0], roles[1]),
    ):
        if "MASTER" not in my_roles.values():
            # A host without a role carries no connection: its internal cache holds what its
            # kernel kept from before (purged after conntrackd's PurgeTimeout), which the
            # peer, now primary for everything, does not need.
            continue
        have, expect = peer.get("external_active"), mine.get("internal_active")
        if have is None or expect is None:
            continue
        if abs(have - expect) > max(100, expect // 5):
            found.append(
                HealthWarning(
                    "sync-diverges",
                    _("%(host)s holds %(have)s of its peer's %(expect)s connection states.")
                    % {"host": host.name, "have": have, "expect": expect},
                )
            )
    return found


def host_drifted(*, host: FirewallHost, sample: HostHealthSample) -> bool:
    """The host answers but runs something other than what it last confirmed: its content
    digest differs (`host.drift`), or it names another version."""
    return (
        sample.reachable
        and not sample.error
        and host.push_status == PushStatus.APPLIED
        and bool(host.applied_checksum)
        # A sample asked for before the rollout confirmed names the version before it: the
        # push itself read the new one back, so that is not drift (the next sample decides).
        and (host.applied_at is None or sample.at >= host.applied_at)
        and (bool(host.drift) or sample.loaded_version != host.applied_checksum)
    )


# --- the beat's round (workers.health.firewall_health_collect) ----------------------------------


def firewalls_health_collect() -> None:
    """Collect every enabled host's health and content digest; repair drift by pushing in full
    what the host should run (under its site's lock); converge sites whose hosts are behind,
    whose changes wait without a run, or that have not compiled the database for
    `PORTAL_FIREWALL_RECONCILE_INTERVAL` seconds (a change whose record and run were both lost
    with Redis still reaches the hosts within that time: the database is the truth)."""
    behind: set[int] = set()
    hosts = FirewallHost.objects.filter(enabled=True).select_related("site", "pinned_version")
    for host in hosts:
        latest = RuleSetVersion.objects.filter(host=host).values_list("content_hash", flat=True)
        if not host.is_pinned and (latest.first() is None or not host.runs(latest.first())):
            behind.add(host.site_id)
        sample = host_health_collect(host=host)
        if host_drifted(host=host, sample=sample):
            log.warning("firewall.drift", host=host.name, parts=host.drift[:10])
            try:
                with site_lock(host.site_id):
                    outcome = host_drift_repair(host=host, loaded_version=sample.loaded_version)
            except LockBusy:
                continue  # a rollout is running; the next collection looks again
            log.info("firewall.drift_repair", host=host.name, ok=bool(outcome and outcome.ok))
    sites = {h.site_id for h in hosts}
    if behind:
        # A host without the newest version (new, back from an outage, failed): converge.
        firewall_change_request(cause="convergence (health check)", site_ids=sorted(behind))
    waiting = [site for site in sites - behind if changes_waiting(site)]
    if waiting:
        # Changes were recorded but their run was lost (a purged queue): run now.
        firewall_change_request(cause="pending changes (health check)", site_ids=waiting)
    stale = sites_not_compiled_since(sites - behind - set(waiting))
    if stale:
        # Nothing says a change waits, but Redis may have lost its record (an outage longer
        # than the clients' retries): compile from the database; unchanged hosts are skipped.
        firewall_change_request(cause="reconcile (health check)", site_ids=stale)


def sites_not_compiled_since(sites: set[int]) -> list[int]:
    """Of `sites`, those no run compiled for `PORTAL_FIREWALL_RECONCILE_INTERVAL` seconds."""
    interval = settings.PORTAL_FIREWALL_RECONCILE_INTERVAL
    if not interval or not sites:
        return []
    cutoff = timezone.now() - timedelta(seconds=interval)
    last = dict(
        # Full compiles only: a delta version (compiled.py `delta_compile`) keeps texts_pending
        # until a full compile renders it, so a stream of member changes does not put the
        # reconcile off.
        RuleSetVersion.objects.filter(
            host__site_id__in=sites, host__enabled=True, texts_pending=False
        )
        .values("host__site_id")
        .annotate(last=Max("snapshot_at"))
        .values_list("host__site_id", "last")
    )
    return sorted(site for site in sites if site in last and last[site] < cutoff)
