"""Compile: the database read once, each host's bundle compiled and stored as a version, and the
compiled rule sets this process keeps (`PUSH_MEMO.compiled`) as the base of the next increment."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from apps.firewall.memo import PUSH_MEMO
from apps.firewall.models import FirewallHost, RuleSetVersion, Site
from apps.firewall.snapshot import SnapshotData, firewall_snapshot_build, snapshot_data_read
from apps.firewall.transport import FirewallUnreachable, pooled_session_for
from apps.firewall.versions import ruleset_version_store
from workers import ruleset as rs
from workers.ruleset import SnapshotError, compile_bundle, diff
from workers.ruleset.bundle import increment_from_stored

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class CompileError(Exception):
    """The database cannot be compiled (an inconsistent row); nothing was pushed."""


def ruleset_compile(
    *, site: Site | None = None, cause: str, actor: User | None = None
) -> list[RuleSetVersion]:
    """Compile the current database for every enabled host of `site` (None: of every site) and
    store the versions."""
    hosts = FirewallHost.objects.filter(enabled=True).select_related("site")
    hosts = list(hosts.filter(site=site) if site is not None else hosts)
    data = snapshot_data_for(hosts)
    return [host_compile(host=host, data=data, cause=cause, actor=actor) for host in hosts]


def snapshot_data_for(hosts: list[FirewallHost]) -> SnapshotData:
    """The database read shared by every host's compile (CompileError names a bad row)."""

    try:
        return snapshot_data_read()
    except SnapshotError as exc:
        for host in hosts:
            host.mark_error(f"compile: {exc}")
        raise CompileError(str(exc)) from exc


def host_compile(
    *,
    host: FirewallHost,
    data: SnapshotData,
    cause: str,
    actor: User | None = None,
    prune: bool = True,
    texts_later: bool = False,
) -> RuleSetVersion:
    """Compile one host's bundle from a database read and store it as a version."""

    started = time.monotonic()
    try:
        snapshot = firewall_snapshot_build(host=host, data=data)
        bundle = compile_bundle(snapshot)
    except SnapshotError as exc:
        host.mark_error(f"compile: {exc}")
        raise CompileError(f"{host.name}: {exc}") from exc
    compiled = bundle.compiled
    version = ruleset_version_store(
        host=host,
        nft_text=compiled.nft,
        tc_text=compiled.tc,
        files=dict(bundle.files),
        artefact_hashes=bundle.artefact_hashes,
        content_hash=bundle.content_hash,
        counts=compiled.counts,
        compile_seconds=round(time.monotonic() - started, 4),
        cause=cause,
        actor=actor,
        snapshot_at=data.taken_at,
        prune=prune,
        texts_later=texts_later,
    )
    PUSH_MEMO.compiled_remember(host.pk, bundle.content_hash, compiled, snapshot)
    version.host = host  # the caller's row (pinned, confirmed) without another query
    return version


def compiled_warm(*, connect: bool) -> list[str]:
    """Read the database and compile every enabled host into this process's caches (members,
    elements, compiled bundles) and, with `connect`, open its SSH connection (kept open for the
    first rollout); returns the hosts whose running bundle is now the base of the next
    increment."""

    hosts = list(FirewallHost.objects.filter(enabled=True).select_related("site"))
    if not hosts:
        return []
    # The hosts' SSH connections open meanwhile and stay open for the first rollout.
    sessions = [pooled_session_for(host).start() for host in hosts] if connect else []
    try:
        data = snapshot_data_read()
        ready = []
        for host in hosts:
            snapshot = firewall_snapshot_build(host=host, data=data)
            bundle = compile_bundle(snapshot)
            PUSH_MEMO.compiled_remember(host.pk, bundle.content_hash, bundle.compiled, snapshot)
            if host.runs(bundle.content_hash):
                ready.append(host.name)
    finally:
        for session in sessions:
            with contextlib.suppress(FirewallUnreachable):  # a host that is down: connect later
                session.__enter__()
            session.close()
    return ready


def compiled_snapshot(*, host_id: int, content_hash: str) -> rs.Snapshot | None:
    """The Snapshot this process compiled into `content_hash` for the host, if it still has it."""
    entry = PUSH_MEMO.compiled_entry(host_id, content_hash)
    return entry.snapshot if entry is not None else None


def increment_for(*, host: FirewallHost, version: RuleSetVersion) -> rs.Incremental | None:
    """The increment (`workers.ruleset.Incremental`: nft and tc) from what `host` runs to
    `version`, or None (send the bundle in full)."""

    if not host.holds_confirmed or host.runs(version.content_hash):
        return None
    new = PUSH_MEMO.compiled_entry(host.pk, version.content_hash)
    if new is None:
        return None
    old = PUSH_MEMO.compiled_entry(host.pk, host.applied_checksum)
    if old is None:
        previous = (
            RuleSetVersion.objects.filter(pk=host.applied_version_id)
            .only("content_hash", "snapshot_json")
            .first()
        )
        text = previous.snapshot_text() if previous else None
        if not text or previous.content_hash != host.applied_checksum:
            return None
        return increment_from_stored(text, previous.content_hash, new.compiled)
    return diff(old.compiled, new.compiled)
