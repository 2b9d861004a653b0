"""Compile: the database read once, each host's bundle compiled and stored as a version, and the
compiled rule sets this process keeps (`PUSH_MEMO.compiled`) as the base of the next increment.

The delta path (`delta_compile`, PORTAL_FIREWALL_DELTA): when only members changed since the
version a host runs, the host's delta base (`PUSH_MEMO.delta`) is stepped by the changed members
and the version is stored without its texts; they are rendered after the push (`delta_render`,
or never, for a version a newer one replaced at once). See docs/ruleset.md, "Delta compile"."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from typing import TYPE_CHECKING

import structlog
from django.conf import settings

from apps.firewall.memo import PUSH_MEMO, DeltaState
from apps.firewall.models import FirewallHost, RuleSetVersion, Site
from apps.firewall.snapshot import SnapshotData, firewall_snapshot_build, snapshot_data_read
from apps.firewall.transport import FirewallUnreachable, pooled_session_for
from apps.firewall.versions import ruleset_version_store
from workers import ruleset as rs
from workers.ruleset import SnapshotError, compile_bundle, diff
from workers.ruleset.bundle import NFT, TC, artefact_hash, increment_from_stored
from workers.ruleset.delta import DeltaBase, NotExpressible, delta_step
from workers.ruleset.kea import kea_config, ra_config

if TYPE_CHECKING:
    from django.contrib.auth.models import User


log = structlog.get_logger(__name__)

KEA, RA = "kea-dhcp4", "portal-ra"  # the file artefacts a device's change touches


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


def snapshot_data_for(hosts: list[FirewallHost], *, since_last: bool = False) -> SnapshotData:
    """The database read shared by every host's compile (CompileError names a bad row);
    `since_last`: read only the members changed since this process's last read (a change's
    run), else check every member's key (a full compile)."""

    try:
        return snapshot_data_read(since_last=since_last)
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
    # Under the version's id: a stored version of the same content (a rendered delta version)
    # keeps its own.
    PUSH_MEMO.compiled_remember(host.pk, version.content_hash, compiled, snapshot)
    version.host = host  # the caller's row (pinned, confirmed) without another query
    return version


def compiled_warm(*, connect: bool, timings: dict[str, float] | None = None) -> list[str]:
    """Read the database and compile every enabled host into this process's caches (members,
    elements, compiled bundles) and, with `connect`, open its SSH connection (kept open for the
    first rollout); returns the hosts whose running bundle is now the base of the next
    increment. `timings` receives the seconds of the read and of each host's compile."""

    hosts = list(FirewallHost.objects.filter(enabled=True).select_related("site"))
    if not hosts:
        return []
    # The hosts' SSH connections open meanwhile and stay open for the first rollout.
    sessions = [pooled_session_for(host).start() for host in hosts] if connect else []
    timings = timings if timings is not None else {}
    try:
        started = time.monotonic()
        data = snapshot_data_read()
        timings["read"] = round(time.monotonic() - started, 3)
        ready = []
        for host in hosts:
            started = time.monotonic()
            snapshot = firewall_snapshot_build(host=host, data=data)
            bundle = compile_bundle(snapshot)
            content_hash = _running_id(host, bundle.content_hash, bundle.artefact_hashes)
            if content_hash != host.applied_checksum:
                content_hash = _running_delta(host, snapshot, bundle) or content_hash
            PUSH_MEMO.compiled_remember(host.pk, content_hash, bundle.compiled, snapshot)
            timings[f"compile {host.name}"] = round(time.monotonic() - started, 3)
            if host.runs(content_hash):
                ready.append(host.name)
                delta_base_ensure(host)
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


# ---------------------------------------------------------------------------- the delta path


def _running_id(host: FirewallHost, content_hash: str, artefact_hashes: dict[str, str]) -> str:
    """The id of the content `artefact_hashes` names for `host`: the version it runs when that
    one holds the same texts (a rendered delta version has an id of its own), else
    `content_hash`."""
    if not host.holds_confirmed or host.applied_checksum == content_hash:
        return content_hash
    running = (
        RuleSetVersion.objects.filter(pk=host.applied_version_id).only("artefact_hashes").first()
    )
    if running is not None and running.artefact_hashes == artefact_hashes:
        return host.applied_checksum
    return content_hash


def _delta_id(digest: str, file_hashes: dict[str, str]) -> str:
    """A delta version's id: its content digest and its file artefacts' hashes."""
    text = json.dumps([digest, sorted(file_hashes.items())])
    return hashlib.sha256(f"delta\n{text}".encode()).hexdigest()


def _running_delta(host: FirewallHost, snapshot: rs.Snapshot, bundle: rs.Bundle) -> str | None:
    """At the warm-up: when the host runs a delta version an earlier worker never rendered and
    this full compile has the same content (its id is the content digest's), keep this compile
    as that version's texts and base; returns its id, else None."""
    if not settings.PORTAL_FIREWALL_DELTA or not host.holds_confirmed:
        return None
    running = (
        RuleSetVersion.objects.filter(pk=host.applied_version_id, texts_pending=True)
        .only("content_hash")
        .first()
    )
    if running is None or running.content_hash != host.applied_checksum:
        return None
    files = {k: v for k, v in bundle.artefact_hashes.items() if k not in (NFT, TC)}
    try:
        base = DeltaBase.from_ruleset(snapshot, bundle.compiled.ruleset)
    except Exception:  # no base: the first change compiles in full
        return None
    if _delta_id(base.digest, files) != running.content_hash:
        return None
    compiled = bundle.compiled
    RuleSetVersion.objects.filter(pk=running.pk).update(
        nft_text=compiled.nft,
        tc_text=compiled.tc,
        files=dict(bundle.files),
        artefact_hashes=bundle.artefact_hashes,
        counts=compiled.counts,
        size_bytes=len(compiled.nft.encode()) + sum(len(t.encode()) for _, t in bundle.files),
        texts_pending=False,
    )
    PUSH_MEMO.delta[host.pk] = DeltaState(running.content_hash, base, snapshot, files)
    return running.content_hash


def delta_base_ensure(host: FirewallHost) -> None:
    """Build the host's delta base from the compiled rule set of the version it runs, unless it
    has one for it (after a full compile the host confirmed; off the path of a change: 0.6 s at
    20,000 members)."""
    if not settings.PORTAL_FIREWALL_DELTA or not host.holds_confirmed:
        return
    state = PUSH_MEMO.delta.get(host.pk)
    if state is not None and state.content_hash == host.applied_checksum:
        return
    PUSH_MEMO.delta.pop(host.pk, None)
    entry = PUSH_MEMO.compiled_entry(host.pk, host.applied_checksum)
    running = (
        RuleSetVersion.objects.filter(pk=host.applied_version_id).only("artefact_hashes").first()
    )
    if entry is None or running is None:
        return
    try:
        base = DeltaBase.from_ruleset(entry.snapshot, entry.compiled.ruleset)
    except Exception as exc:  # no base: every change compiles in full, as without the setting
        log.warning("firewall.delta_base_failed", host=host.name, error=str(exc))
        return
    files = {k: v for k, v in running.artefact_hashes.items() if k not in (NFT, TC)}
    PUSH_MEMO.delta[host.pk] = DeltaState(host.applied_checksum, base, entry.snapshot, files)


def delta_forget(host_id: int) -> None:
    """Drop a host's delta base (a refused or failed push: the next change compiles in full)."""
    PUSH_MEMO.delta.pop(host_id, None)


def _members_changed(
    state: DeltaState, snapshot: rs.Snapshot
) -> dict[int, rs.Member | None] | None:
    """The members of `snapshot` whose typed value is not the base's (None: a member left),
    or None when anything but members differs (policy, host, HA, resolver, DHCP input beyond
    its devices: a device's reservation is a member's change, `_device_files`)."""
    old = state.snapshot
    if (snapshot.policy, snapshot.host, snapshot.ha, snapshot.resolver) != (
        old.policy,
        old.host,
        old.ha,
        old.resolver,
    ):
        return None
    if not _dhcp_devices_only(old.dhcp, snapshot.dhcp):
        return None
    entries = state.base.entries
    changed: dict[int, rs.Member | None] = {}
    for member in snapshot.members:
        entry = entries.get(member.id)
        # Unchanged members are the very objects of the member cache: identity first.
        if entry is None or (entry.member is not member and entry.member != member):
            changed[member.id] = member
    if len(entries) + len(changed) > len(snapshot.members):
        now = {m.id for m in snapshot.members}
        changed.update((mid, None) for mid in entries if mid not in now)
    return changed


def delta_catch_up(*, timings: dict[str, float] | None = None) -> list[str]:
    """After a handover (apps/infra/handover.py): the old worker may have pushed steps while
    this one warmed up, so a host may run a version newer than the base the warm-up built.
    Step each such base by the members that changed since (the database as it is now, read
    through the warm member cache) and keep it when the step's id is the version the host
    runs (the old worker stepped the same members to the same content); else warm up again
    (a full compile recognises the running version as the warm-up does). Returns the hosts
    that have a base for what they run."""
    timings = timings if timings is not None else {}
    started = time.monotonic()
    hosts = list(FirewallHost.objects.filter(enabled=True).select_related("site"))
    stale = [
        h
        for h in hosts
        if h.holds_confirmed
        and not (h.pk in PUSH_MEMO.delta and h.runs(PUSH_MEMO.delta[h.pk].content_hash))
    ]
    if not stale or not settings.PORTAL_FIREWALL_DELTA:
        timings["catch_up"] = round(time.monotonic() - started, 3)
        return [h.name for h in hosts if h.pk in PUSH_MEMO.delta]
    data = snapshot_data_read(since_last=True)
    again = []
    for host in stale:
        if not _delta_catch_up_host(host, data):
            delta_forget(host.pk)
            again.append(host)
    timings["catch_up"] = round(time.monotonic() - started, 3)
    if again:  # rare: a change the old worker pushed beside another one not yet pushed
        compiled_warm(connect=False, timings=timings)
        timings["catch_up"] = round(time.monotonic() - started, 3)
    return [h.name for h in hosts if h.pk in PUSH_MEMO.delta]


def _delta_catch_up_host(host: FirewallHost, data: SnapshotData) -> bool:
    state = PUSH_MEMO.delta.get(host.pk)
    if state is None:
        return False
    try:
        snapshot = firewall_snapshot_build(host=host, data=data)
    except SnapshotError:
        return False
    changed = _members_changed(state, snapshot)
    device_files = _device_files(state.snapshot, snapshot) if changed is not None else {}
    if changed is None or not (changed or device_files):
        return False  # something else changed, or nothing did and yet it runs another version
    try:
        delta_step(state.base, changed)
    except (NotExpressible, SnapshotError):
        return False
    state.file_hashes.update((name, artefact_hash(text)) for name, text in device_files.items())
    content_hash = _delta_id(state.base.digest, state.file_hashes)
    if content_hash != host.applied_checksum:
        return False
    running = (
        RuleSetVersion.objects.filter(pk=host.applied_version_id, content_hash=content_hash)
        .defer("nft_text", "tc_text", "files", "snapshot_json")
        .first()
    )
    if running is None:
        return False
    running.host = host
    running.delta_snapshot = snapshot  # type: ignore[attr-defined]
    state.content_hash, state.snapshot = content_hash, snapshot
    state.unrendered = running  # rendered before the next full compile (the diff's base)
    return True


def delta_compile(*, host: FirewallHost, data: SnapshotData, cause: str) -> RuleSetVersion | None:
    """The host's next version by the delta path, or None (compile in full): only when the host
    runs the version its base describes and nothing but members changed since (policy, host,
    site, HA, resolver and DHCP input equal but for devices: a device's change carries Kea's
    and portal-ra's new texts, `version.files`). The version is stored without its texts (`texts_pending` in the row) and carries
    its increment (`version.delta_increment`); `delta_render` writes its texts after the push.
    A step that cannot be expressed drops the base."""
    if not settings.PORTAL_FIREWALL_DELTA:
        return None
    state = PUSH_MEMO.delta.get(host.pk)
    if state is None or not host.runs(state.content_hash):
        return None
    started = time.monotonic()
    try:
        snapshot = firewall_snapshot_build(host=host, data=data)
    except SnapshotError:
        return None  # the full compile names the row
    changed = _members_changed(state, snapshot)
    if changed is None:
        return None
    # Kea's and portal-ra's new texts when devices changed (rendered before the step moves the
    # base's snapshot on).
    device_files = _device_files(state.snapshot, snapshot)
    # A MAC change of a device without IPv6 changes Kea's reservation only: no member's typed
    # value and no element (nothing in the rule set is keyed by MAC), so the step carries Kea's
    # file and an increment without elements.
    if not changed and not device_files:  # nothing of this host's changed: it runs it
        running = (
            RuleSetVersion.objects.filter(pk=host.applied_version_id)
            .defer("nft_text", "tc_text", "files", "snapshot_json")
            .first()
        )
        if running is not None:
            running.host = host
        return running
    try:
        increment = delta_step(state.base, changed)
    except (NotExpressible, SnapshotError) as exc:
        delta_forget(host.pk)
        log.info("firewall.delta_not_expressible", host=host.name, reason=str(exc))
        return None
    state.file_hashes.update((name, artefact_hash(text)) for name, text in device_files.items())
    content_hash = _delta_id(state.base.digest, state.file_hashes)
    state.content_hash, state.snapshot = content_hash, snapshot
    version = RuleSetVersion.objects.create(
        host=host,
        content_hash=content_hash,
        nft_text="",
        tc_text="",
        files={},
        texts_pending=True,  # until delta_render (a version never rendered cannot be put back)
        artefact_hashes=dict(state.file_hashes),
        counts=dict(state.base.counts),
        size_bytes=0,
        compile_seconds=round(time.monotonic() - started, 4),
        cause=cause[:500],
        snapshot_at=data.taken_at,
    )
    version.texts_pending = False  # this object is pushed by its increment
    version.files = device_files  # Kea's and portal-ra's new texts travel with it (Push.payload)
    version.host = host
    version.delta_increment = increment  # type: ignore[attr-defined]
    version.delta_snapshot = snapshot  # type: ignore[attr-defined]
    state.unrendered = version
    return version


def _dhcp_devices_only(old: rs.Dhcp | None, new: rs.Dhcp | None) -> bool:
    """The DHCP input is equal, or differs only in its devices (reservations, RA prefixes)."""
    if new is old or new == old:
        return True
    return old is not None and new is not None and old.same_but_devices(new)


def _device_files(old: rs.Snapshot, new: rs.Snapshot) -> dict[str, str]:
    """The DHCP files a delta step carries: {} when the host's DHCP input is unchanged; Kea's
    and portal-ra's new texts when only its devices changed (reservations, RA prefixes: a
    registration, a MAC, a move), rendered from the lines of the host's last rendering
    (docs/dhcp.md). `_members_changed` sends anything else of DHCP to the full compile."""
    if new.dhcp is old.dhcp or new.dhcp == old.dhcp:
        return {}
    texts = {KEA: kea_config(new), RA: ra_config(new)}
    return {name: text for name, text in texts.items() if text is not None}


def delta_render_pending(host: FirewallHost) -> None:
    """Before a full compile of the host: render the delta version its base describes if the
    host confirmed it, so the full compile can name the same texts by that version and diff
    from it."""
    state = PUSH_MEMO.delta.get(host.pk)
    if state is None or state.unrendered is None:
        return
    # Only what the host confirmed: a step refused by its check is never rendered.
    if state.unrendered.content_hash == state.content_hash == host.applied_checksum:
        delta_render(state.unrendered)
    state.unrendered = None


def delta_render(version: RuleSetVersion) -> bool:
    """Render a delta version's texts (a full compile of the snapshot it was stepped to) and
    store them, so the version can be put back, repaired to and diffed from like any other;
    its compiled rule set becomes the base of the next full compile's increment."""
    snapshot = getattr(version, "delta_snapshot", None)
    if snapshot is None:
        return False
    try:
        bundle = compile_bundle(snapshot)
    except SnapshotError as exc:
        log.warning("firewall.delta_render_failed", version=version.pk, error=str(exc))
        return False
    files = {k: v for k, v in bundle.artefact_hashes.items() if k not in (NFT, TC)}
    if files != version.artefact_hashes:  # cannot happen: only members changed
        log.warning("firewall.delta_render_files_differ", version=version.pk)
        delta_forget(version.host_id)
        return False
    compiled = bundle.compiled
    RuleSetVersion.objects.filter(pk=version.pk).update(
        nft_text=compiled.nft,
        tc_text=compiled.tc,
        files=dict(bundle.files),
        artefact_hashes=bundle.artefact_hashes,
        counts=compiled.counts,
        size_bytes=len(compiled.nft.encode()) + sum(len(t.encode()) for _, t in bundle.files),
        texts_pending=False,
    )
    version.delta_snapshot = None  # type: ignore[attr-defined]
    PUSH_MEMO.compiled_remember(version.host_id, version.content_hash, compiled, snapshot)
    return True
