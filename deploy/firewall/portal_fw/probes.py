"""Capability probes: what this host's kernel and tools can do, asked before a bundle uses it.

`check_bundle` asks `missing(...)` for the features a bundle's nft text needs and refuses it
before anything changes, with each missing feature's own message (`REFUSALS`). A probe gets
the bundle's nft text (to name a real interface of it) and answers True/False; a True answer
is kept for the agent's life (a kernel does not lose a feature), a False one is asked again
next time (a module may have been installed meanwhile).

Add a probe here (and the text that needs it in `NEEDS`) when the compiler starts to emit
something a kernel may lack.

flowtable (issue 29): the fast path's `flowtable` needs CONFIG_NF_FLOW_TABLE (and
CONFIG_NF_FLOW_TABLE_INET for the inet family), which some kernels lack (Debian 12's has
both as modules). The probe is `nft -c` of a table holding only a flowtable on an interface
of the bundle that exists here: the kernel looks the flowtable type up (and loads its module
on demand: a check does that too, shown in the kernel lab) and answers "No such file or
directory" without it. A missing interface gives the same answer, hence one that exists
(none when the bundle names none that exists: the type lookup alone).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

from .common import failed, run

FLOWTABLE = "flowtable"

# what in an nft text needs the feature
NEEDS: dict[str, re.Pattern[str]] = {
    FLOWTABLE: re.compile(r"^\s*flowtable\s+\S+\s*\{", re.M),
}
# why a bundle that needs a missing feature is refused (the portal translates these texts:
# apps/firewall/reasons.py)
REFUSALS: dict[str, str] = {
    FLOWTABLE: "this host's kernel has no flowtable support (CONFIG_NF_FLOW_TABLE): "
    "turn off the site's fast path",
}
_known: dict[str, bool] = {}
DETAIL: dict[str, str] = {}  # feature -> what the last failed probe said (the refusal's detail)
_DEVICES = re.compile(r"^\s*devices\s*=\s*\{([^}]*)\}", re.M)


def flowtable_devices(nft_text: str) -> list[str]:
    """The interfaces the text's flowtables name (in order, once each)."""
    names: list[str] = []
    for m in _DEVICES.finditer(nft_text):
        for item in m.group(1).split(","):
            name = item.strip().strip('"')
            if name and name not in names:
                names.append(name)
    return names


def interface_exists(name: str) -> bool:
    """`name` is an interface of this network namespace."""
    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    return True


def flowtable_probe_text(device: str | None, table: str = "portal_probe") -> str:
    """A table holding only a flowtable (on `device`, or on none)."""
    devices = f'\t\tdevices = {{ "{device}" }}\n' if device else ""
    return (
        f"table inet {table} {{\n\tflowtable probe {{\n\t\thook ingress priority filter\n"
        f"{devices}\t}}\n}}\n"
    )


def probe_flowtable(nft_text: str) -> bool:
    """`nft -c` of a flowtable on one of the text's interfaces that exists here."""
    device = next((d for d in flowtable_devices(nft_text) if interface_exists(d)), None)
    result = run(["nft", "-c", "-f", "-"], stdin=flowtable_probe_text(device), timeout=30)
    if result.returncode != 0:
        DETAIL[FLOWTABLE] = (result.stderr or result.stdout).strip()[-2000:]
    return result.returncode == 0


# feature -> how to ask the host, given the bundle's nft text (True: available)
PROBES: dict[str, Callable[[str], bool]] = {FLOWTABLE: probe_flowtable}


def available(feature: str, nft_text: str = "") -> bool:
    if not _known.get(feature):
        _known[feature] = PROBES[feature](nft_text)
    return _known[feature]


def missing(nft_text: str) -> list[str]:
    """The features the text needs that this host lacks (empty: none, or no probe asked)."""
    return sorted(
        feature
        for feature, pattern in NEEDS.items()
        if pattern.search(nft_text) and not available(feature, nft_text)
    )


def check(nft_text: str) -> None:
    """Refuse (before anything changes) a text that needs what this host lacks: the message
    says what and what to do, `missing` names the features for the portal."""
    lacking = missing(nft_text)
    if lacking:
        message = "; ".join(REFUSALS.get(f, f"this host lacks {f}") for f in lacking)
        detail = "\n".join(DETAIL[f] for f in lacking if f in DETAIL) or None
        raise failed(message, detail, artefact="nft", missing=lacking)


def report() -> dict[str, bool]:
    """The answers known so far (the agent's hello carries them; asking here would cost the
    hello a probe that no bundle needed yet)."""
    return dict(sorted(_known.items()))
