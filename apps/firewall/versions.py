"""Versions: a compiled bundle kept per host (the same content again is the same version), its
texts written now or beside the pushes (`texts_later`), the history trimmed, and the compiler's
input kept for the newest few (the base of an increment for a fresh worker)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.firewall.memo import PUSH_MEMO
from apps.firewall.models import FirewallHost, RuleSetVersion

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def ruleset_version_store(
    *,
    host: FirewallHost,
    nft_text: str,
    tc_text: str,
    content_hash: str,
    counts: dict[str, int],
    compile_seconds: float,
    cause: str,
    actor: User | None = None,
    snapshot_at: datetime | None = None,
    files: dict[str, str] | None = None,
    artefact_hashes: dict[str, str] | None = None,
    prune: bool = True,
    texts_later: bool = False,
) -> RuleSetVersion:
    """Keep a compiled bundle; the same content again returns the stored version (with the
    newer snapshot time: it carries every change made up to then). `prune=False` leaves the
    history's trimming to the caller (`versions_prune`, after a rollout). `texts_later`: the
    row is stored without its texts (about 16 MB at 20,000 members, 0.2 s to write) and
    marked pending; the returned object holds them and `texts_unwritten` is True until the
    caller's `version_texts_write`."""
    latest = (
        RuleSetVersion.objects.filter(host=host)
        .only("content_hash", "snapshot_at", "texts_pending", "artefact_hashes")
        .first()
    )
    # The same texts under another id: a delta version rendered after its push (compiled.py).
    same_texts = (
        bool(artefact_hashes)
        and latest is not None
        and (not latest.texts_pending and latest.artefact_hashes == artefact_hashes)
    )
    if latest is not None and (latest.content_hash == content_hash or same_texts):
        if snapshot_at and snapshot_at > latest.snapshot_at:
            latest.snapshot_at = snapshot_at
            latest.save(update_fields=["snapshot_at"])
        if latest.texts_pending:  # its worker stopped before writing them: write them now
            latest.nft_text, latest.tc_text, latest.files = nft_text, tc_text, files or {}
            version_texts_write(latest)
        return latest
    version = RuleSetVersion.objects.create(
        host=host,
        content_hash=content_hash,
        nft_text="" if texts_later else nft_text,
        tc_text="" if texts_later else tc_text,
        files={} if texts_later else files or {},
        texts_pending=texts_later,
        artefact_hashes=artefact_hashes or {},
        counts=counts,
        size_bytes=len(nft_text.encode()) + sum(len(f.encode()) for f in (files or {}).values()),
        compile_seconds=compile_seconds,
        cause=cause[:500],
        actor=actor if getattr(actor, "pk", None) else None,
        snapshot_at=snapshot_at or timezone.now(),
    )
    if texts_later:
        version.nft_text, version.tc_text, version.files = nft_text, tc_text, files or {}
        version.texts_pending = False  # this object holds them (the row until written)
        version.texts_unwritten = True  # type: ignore[attr-defined]
    if prune:
        versions_prune(host=host)
    return version


def version_texts_write(version: RuleSetVersion) -> None:
    """Store the texts of a version kept with `texts_later` (or repair one left pending)."""
    RuleSetVersion.objects.filter(pk=version.pk).update(
        nft_text=version.nft_text,
        tc_text=version.tc_text,
        files=version.files,
        texts_pending=False,
    )
    version.texts_pending = False
    version.texts_unwritten = False  # type: ignore[attr-defined]


def versions_prune(*, host: FirewallHost) -> None:
    """Keep the newest `PORTAL_RULESET_HISTORY` versions of a host (deleting one costs about
    half a second at 20,000 members: its 16 MB of text; a rollout does it after its pushes)."""
    keep = settings.PORTAL_RULESET_HISTORY
    stale = RuleSetVersion.objects.filter(host=host).values_list("pk", flat=True)[keep:]
    # Never drop what a host runs or is pinned to: a rollback to it must stay possible.
    held = FirewallHost.objects.filter(pk=host.pk).values_list(
        "applied_version_id", "pinned_version_id"
    )
    kept = [pk for row in held for pk in row if pk] + [
        pk for pk in (host.applied_version_id, host.pinned_version_id) if pk
    ]
    RuleSetVersion.objects.filter(pk__in=list(stale)).exclude(pk__in=kept).delete()


SNAPSHOTS_KEPT = 5


def version_snapshots_store(*, versions: Iterable[RuleSetVersion]) -> None:
    """Keep each version's compiler input (after the rollout: off the critical path), taken
    from this process's compile cache, and only for the newest few versions of a host."""
    import zlib

    for version in versions:
        entry = PUSH_MEMO.compiled_entry(version.host_id, version.content_hash)
        if entry is None or version.snapshot_json:
            continue
        data = zlib.compress(entry.snapshot.to_json().encode("ascii"), 1)  # fast; size matters less
        RuleSetVersion.objects.filter(pk=version.pk).update(snapshot_json=data)
        older = (
            RuleSetVersion.objects.filter(host_id=version.host_id, snapshot_json__isnull=False)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[SNAPSHOTS_KEPT:]
        )
        RuleSetVersion.objects.filter(pk__in=list(older)).update(snapshot_json=None)
