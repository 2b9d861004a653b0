"""Reads of the firewall app (the DB -> compiler bridge joins this module with its issue)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

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


def version_diff(*, old: RuleSetVersion, new: RuleSetVersion) -> Iterator[str] | None:
    """A unified diff of two versions' nft text, or None when they are too large to diff here."""
    a, b = old.nft_text.splitlines(), new.nft_text.splitlines()
    if len(a) + len(b) > DIFF_MAX_LINES:
        return None
    return difflib.unified_diff(a, b, f"#{old.pk}", f"#{new.pk}", lineterm="", n=2)
