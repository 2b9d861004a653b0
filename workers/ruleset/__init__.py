"""The rule-set compiler: Snapshot -> IR -> nft text + tc batch; pure Python, stdlib only.

Public API (what `apps/firewall` calls)::

    snapshot = Snapshot(policy=Policy(...), host=Host(...), members=(Member(...), ...))
    compiled = compile_snapshot(snapshot)       # .nft, .tc, .content_hash, .counts, .ruleset
    bundle = compile_bundle(snapshot)           # every artefact of the host, one hash
    step = diff(previous_compiled, compiled)    # Incremental(.nft, .tc, ...) or None: use full
    stored = snapshot.to_json()                 # compact, deterministic; store with the version
    step = diff_stored(stored, stored_hash, compiled)   # the same increment from stored data

Nothing here imports Django or Celery (tests/unit/ruleset checks it). See docs in `build`
(rule layout), `render` (transaction and content hash), `diff` (increments) and
`shaping_layouts` (HTB and mq roots).
"""

from __future__ import annotations

from workers.ruleset.build import (
    NAT_TABLE_FAMILY,
    NAT_TABLE_NAME,
    TABLE_FAMILY,
    TABLE_NAME,
    build,
)
from workers.ruleset.bundle import Bundle, bundle_of, compile_bundle, file_artefact
from workers.ruleset.diff import Incremental, diff, diff_rulesets, diff_stored
from workers.ruleset.render import Compiled, render
from workers.ruleset.snapshot import (
    IFNAME_RE,
    CaptivePortalUrl,
    Device,
    Dhcp,
    Ha,
    Host,
    Member,
    Opening,
    Policy,
    PortForward,
    PortRange,
    PortRule,
    Protocol,
    Shaping,
    ShapingRoot,
    Snapshot,
    SnapshotError,
    gc_paused,
    port_range,
)


def compile_snapshot(snapshot: Snapshot) -> Compiled:
    """Compile one host's snapshot to its nft transaction, tc batch, counts and content hash."""
    return render(build(snapshot))


__all__ = [
    "IFNAME_RE",
    "NAT_TABLE_FAMILY",
    "NAT_TABLE_NAME",
    "TABLE_FAMILY",
    "TABLE_NAME",
    "Bundle",
    "CaptivePortalUrl",
    "Compiled",
    "Device",
    "Dhcp",
    "Ha",
    "Host",
    "Incremental",
    "Member",
    "Opening",
    "Policy",
    "PortForward",
    "PortRange",
    "PortRule",
    "Protocol",
    "Shaping",
    "ShapingRoot",
    "Snapshot",
    "SnapshotError",
    "build",
    "bundle_of",
    "compile_bundle",
    "compile_snapshot",
    "diff",
    "diff_rulesets",
    "diff_stored",
    "file_artefact",
    "gc_paused",
    "port_range",
    "render",
]
