"""Why a push failed, in the reader's language: the host agent's refusals are English sentences
(deploy/firewall/portal_fw, e.g. probes.REFUSALS) stored as they came in the host's and the
site's reason; the pages translate the ones they know when they show them."""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

# The agent's own sentences (kept equal to its texts: tests/integration/test_push_reasons.py).
KNOWN = (
    gettext_noop("the host refused the bundle"),
    gettext_noop(
        "this host's kernel has no flowtable support (CONFIG_NF_FLOW_TABLE): "
        "turn off the site's fast path"
    ),
)


def translated(reason: str) -> str:
    """`reason` with every known sentence in the active language (the rest as it came)."""
    for sentence in KNOWN:
        if sentence in reason:
            reason = reason.replace(sentence, gettext(sentence))
    return reason
