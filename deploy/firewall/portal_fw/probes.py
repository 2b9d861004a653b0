"""Capability probes: what this host's kernel and tools can do, asked before a bundle uses it.

A probe answers True/False once per agent (cached); `check_bundle` asks `missing(...)` for the
features a bundle's nft text needs and refuses it before anything changes, naming the feature.
Add a probe here (and the text that needs it in `NEEDS`) when the compiler starts to emit
something a kernel may lack (flowtables: CONFIG_NF_FLOW_TABLE, issue 29).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# feature -> how to ask the host (True: available)
PROBES: dict[str, Callable[[], bool]] = {}
# feature -> what in an nft text needs it
NEEDS: dict[str, re.Pattern[str]] = {}
_known: dict[str, bool] = {}


def available(feature: str) -> bool:
    if feature not in _known:
        _known[feature] = PROBES[feature]()
    return _known[feature]


def missing(nft_text: str) -> list[str]:
    """The features the text needs that this host lacks (empty: none, or no probe asked)."""
    return sorted(
        feature
        for feature, pattern in NEEDS.items()
        if pattern.search(nft_text) and not available(feature)
    )


def report() -> dict[str, bool]:
    """Every probe's answer (the agent's hello carries them)."""
    return {feature: available(feature) for feature in sorted(PROBES)}
