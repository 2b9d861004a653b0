"""Rollout order: the hosts of a site one after the other, the backup of a pair first; a bundle a
host refuses never reaches the next. Also the pushes outside a rollout: a drift repaired, a
host put back on the version staff pinned."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from apps.firewall.compiled import CompileError, delta_forget, delta_render_pending, host_compile
from apps.firewall.extensions import Roles, firewall_extensions
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.pipeline import firewall_change_request
from apps.firewall.push import PushOutcome, ruleset_push
from apps.firewall.snapshot import snapshot_data_read
from apps.firewall.transport import FirewallSession, pooled_session_for
from workers.ruleset import SnapshotError


class Prepared(NamedTuple):
    """A host's version, compiled just in time, or why it could not be (raised at its turn)."""

    version: RuleSetVersion | None
    error: Exception | None


def backup_first(hosts: list[FirewallHost]) -> list[FirewallHost]:
    """Rollout order within a site: the hosts of a pair that hold fewer primary roles first
    (judged from their newest health sample), the IPv4 primary last, then rollout order. A
    bundle the backup refuses or that leaves it unhealthy never reaches the primary."""
    paired = [h for h in hosts if h.sync_interface]
    roles: dict[int, Roles] = {}
    for extension in firewall_extensions():  # health: the roles of the newest samples
        roles.update(extension.host_roles(hosts=paired) if paired else {})

    def key(host: FirewallHost) -> tuple:
        mine = roles.get(host.pk, {})
        masters = sum(1 for state in mine.values() if state == "MASTER")
        return (masters, mine.get("ipv4") == "MASTER", host.rollout_order, host.name)

    return sorted(hosts, key=key)


def ruleset_rollout(*, versions: Iterable[RuleSetVersion]) -> list[PushOutcome]:
    """Push compiled versions host by host in rollout order (the hosts of one site); see
    `hosts_rollout`."""
    by_host = {v.host_id: v for v in versions}
    hosts = [v.host for v in by_host.values()]
    return hosts_rollout(hosts, lambda host: by_host[host.pk])


def hosts_rollout(
    hosts: Iterable[FirewallHost],
    version_for: Callable[[FirewallHost], RuleSetVersion],
    *,
    sessions: dict[int, FirewallSession] | None = None,
    during_last: Callable[[], None] | None = None,
) -> list[PushOutcome]:
    """Push host by host in rollout order; `version_for(host)` gives (or compiles, just in time)
    what the host should run: the next host's bundle compiles while the current one applies,
    and `during_last` runs while the last one applies.
    A refused or unhealthy bundle stops the rollout: it never reaches the next host. An
    unreachable host is skipped: it stays pending and gets the newest version when it returns.
    A pinned host is skipped and says so: staff hold it on the version they put back.
    `sessions`: connections the caller started already."""
    outcomes: list[PushOutcome] = []
    ordered = backup_first([h for h in hosts if h.enabled])
    # Connect to every host that may be due at once (or take its open connection from this
    # process's pool), on the pool's loop in its own thread: handshakes run while this thread
    # reads and compiles. Connecting runs no helper verb.
    sessions = dict(sessions or {})
    for h in ordered:
        if not h.is_pinned and h.pk not in sessions:
            sessions[h.pk] = pooled_session_for(h).start()
    prepared: dict[int, Prepared] = {}

    def prepare(host: FirewallHost) -> None:
        if host.pk not in prepared:
            try:
                prepared[host.pk] = Prepared(version_for(host), None)
            except Exception as exc:  # raised at that host's turn, not during another's push
                prepared[host.pk] = Prepared(None, exc)

    def version_of(host: FirewallHost) -> RuleSetVersion:
        prepare(host)
        version, error = prepared[host.pk]
        if version is None:
            raise error or CompileError(f"{host.name}: nothing compiled")
        return version

    try:
        for index, host in enumerate(ordered):
            if host.is_pinned:
                message = f"pinned to #{host.pinned_version_id}: automatic pushes skip it"
                outcomes.append(
                    PushOutcome(
                        host.name, True, "", message, skipped=True, pinned_to=host.pinned_version_id
                    )
                )
                continue
            version = version_of(host)
            if host.runs(version.content_hash):
                outcomes.append(PushOutcome(host.name, True, "", "already applied", skipped=True))
                continue
            later = next((h for h in ordered[index + 1 :] if not h.is_pinned), None)
            outcome = ruleset_push(
                host=host,
                version=version,
                session=sessions.pop(host.pk),
                during=(lambda h=later: prepare(h)) if later is not None else during_last,
            )
            outcomes.append(outcome)
            if not outcome.ok and not outcome.unreachable:
                for later_host in ordered[index + 1 :]:
                    if not later_host.is_pinned:
                        later_host.mark_pending()
                break
    finally:
        for session in sessions.values():
            session.close()
    return outcomes


def drifted_artefacts(parts: Iterable[str]) -> set[str] | None:
    """The artefacts the drifted digest parts belong to ("nft:...": nft, "tc:DEV": tc,
    "file:NAME": that file), or None when a part is of no known artefact."""
    names: set[str] = set()
    for part in parts:
        kind, _, rest = part.partition(":")
        if kind in {"nft", "tc"}:
            names.add(kind)
        elif kind == "file" and rest:
            names.add(rest)
        else:
            return None
    return names or None


def host_drift_repair(
    *, host: FirewallHost, loaded_version: str | None = None
) -> PushOutcome | None:
    """Push what a drifted host should run: the version it is pinned to, or else its newest
    version. When the host still runs that very version (`loaded_version`, from the health
    reading) and its digest names the drifted parts (`host.drift`), only the artefacts those
    parts belong to are sent, each in full (tc drift: the tc tree, nft untouched; nft drift:
    the rule set, tc untouched), under the agent's one rollback point; else everything (what
    it runs is unknown, so no increment)."""
    version = host.pinned_version or RuleSetVersion.objects.filter(host=host).first()
    if version is None:
        return None
    if version.texts_pending:  # the delta version the host runs: render it first
        delta_render_pending(host)
        version.refresh_from_db()
    only = None
    if (
        loaded_version is not None
        and loaded_version == version.content_hash == host.applied_checksum
    ):
        only = drifted_artefacts(host.drift)
    host.mark_pending()  # no confirmed base any more: no increment
    delta_forget(host.pk)
    if version.texts_pending:
        # A delta version this process cannot render (the worker that stepped it keeps its
        # snapshot, or a newer change replaced it and the worker stopped): compile the host in
        # full here (the caller holds the site's lock) and push that, so the repair is done
        # when this returns (a device's registration is a delta version too: docs/dhcp.md).
        try:
            version = host_compile(
                host=host, data=snapshot_data_read(), cause=f"drift repair {host.name}"
            )
        except (CompileError, SnapshotError):
            firewall_change_request(cause=f"drift repair {host.name}", site_ids=[host.site_id])
            return None
        only = None  # a version compiled just now: everything
    return ruleset_push(host=host, version=version, only=only)


def host_rollback(*, host: FirewallHost) -> PushOutcome | None:
    """Push the version a host is pinned to (the worker calls this under the site's lock)."""
    if host.pinned_version is None:
        return None
    return ruleset_push(host=host, version=host.pinned_version)
