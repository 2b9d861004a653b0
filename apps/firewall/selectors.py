"""Reads of the firewall app for the staff screens: versions, push log, diffs.

The database -> compiler bridge is `apps.firewall.snapshot`, live state `apps.firewall.live`,
compile and rollout `apps.firewall.rollout`, staff actions `apps.firewall.services`.
"""

from __future__ import annotations

import difflib
from typing import Any

from django.db.models import QuerySet

from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion

DIFF_MAX_LINES = 200_000


def host_versions(*, host: FirewallHost) -> QuerySet[RuleSetVersion]:
    """A host's stored versions, newest first, without their (large) texts."""
    return RuleSetVersion.objects.filter(host=host).defer("nft_text", "tc_text")


def host_push_log(*, host: FirewallHost) -> QuerySet[PushLogEntry]:
    """A host's push steps, newest first."""
    return (
        PushLogEntry.objects.filter(host=host)
        .select_related("version")
        .defer("version__nft_text", "version__tc_text")
    )


def version_artefacts(version: RuleSetVersion) -> dict[str, str]:
    """Every artefact of a stored bundle by name: nft, tc, then the configuration files."""
    return {"nft": version.nft_text, "tc": version.tc_text, **dict(sorted(version.files.items()))}


def version_diff(*, old: RuleSetVersion, new: RuleSetVersion) -> list[dict[str, Any]] | None:
    """A unified diff per artefact of two versions ({"artefact", "lines"}: only artefacts that
    differ), or None when they are too large to diff here."""
    before, after = version_artefacts(old), version_artefacts(new)
    sections = []
    total = 0
    for name in sorted(before.keys() | after.keys(), key=lambda n: (n not in ("nft", "tc"), n)):
        a = before.get(name, "").splitlines()
        b = after.get(name, "").splitlines()
        total += len(a) + len(b)
        if total > DIFF_MAX_LINES:
            return None
        if a != b:
            lines = difflib.unified_diff(
                a, b, f"#{old.pk} {name}", f"#{new.pk} {name}", lineterm="", n=2
            )
            sections.append({"artefact": name, "lines": list(lines)})
    return sections


def version_changes(*, old: RuleSetVersion, new: RuleSetVersion) -> list[dict[str, object]]:
    """What putting `new` in place of `old` changes, per artefact: element and class counts
    (nft, tc) and which configuration files differ."""
    rows: list[dict[str, object]] = []
    keys = sorted(set(old.counts) | set(new.counts))
    for key in keys:
        before, after = int(old.counts.get(key, 0)), int(new.counts.get(key, 0))
        if before != after:
            rows.append({"artefact": key, "before": before, "after": after})
    old_hashes, new_hashes = old.artefact_hashes or {}, new.artefact_hashes or {}
    for name in sorted(set(old_hashes) | set(new_hashes)):
        if name not in ("nft", "tc") and old_hashes.get(name) != new_hashes.get(name):
            rows.append({"artefact": name, "before": None, "after": None})
    return rows
