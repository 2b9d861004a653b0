"""\"Test my forward\": a probe host outside the network connects to a forward's public address
and port (or an IPv6 opening's device address) and says reachable / refused / no answer.

The probe host runs deploy/probe/portal-probe as the forced command of the portal's key (in the
lab: pl-probe, an Internet-side host); it only probes the network's own address space. A member
may test `forward_tests_per_hour` times an hour (staff: unlimited); an answer is reused for a
minute; every test is audited.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.utils.translation import gettext as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.audit.services import audit_record
from apps.network.extensions import ProbeUnreachable, network_extensions
from apps.network.models import Ipv6Opening, NetworkSettings, PortForward

if TYPE_CHECKING:
    from django.contrib.auth.models import User

CACHE_SECONDS = 60
RESULTS = ("reachable", "refused", "no-answer", "open-or-filtered")


class ProbeRefused(Exception):
    """The test cannot run now (no probe host, rate limit, nothing to test); says why."""


@dataclass(frozen=True)
class ProbeResult:
    protocol: str
    address: str
    port: int
    result: str
    rtt_ms: float | None
    cached: bool = False

    @property
    def label(self) -> str:
        return {
            "reachable": _("reachable"),
            "refused": _("refused: the device answered that nothing listens on this port"),
            "no-answer": _("no answer: is the device on and its server running?"),
            "open-or-filtered": _("open or filtered (UDP: no answer is normal for many services)"),
        }.get(self.result, self.result)


def _rate_key(member_id: int) -> str:
    return f"portal:probe:rate:{member_id}"


def _targets_of_forward(forward: PortForward) -> list[tuple[str, str, int]]:
    # No address first: enabling would not help (a released membership's forward is both).
    if forward.public_address is None:  # the membership no longer holds a public IPv4
        raise ProbeRefused(_("The forward has no public address to test."))
    if not forward.enabled:  # the firewalls do not forward it: a test would only say "closed"
        raise ProbeRefused(_("This forward is disabled; enable it to test it."))
    address = str(forward.public_address.address)
    protocols = ("tcp", "udp") if forward.protocol == "both" else (forward.protocol,)
    return [(p, address, forward.public_first) for p in protocols]


def _targets_of_opening(opening: Ipv6Opening) -> list[tuple[str, str, int]]:
    if not opening.enabled:
        raise ProbeRefused(_("This opening is disabled; enable it to test it."))
    if not opening.device.ipv6:
        raise ProbeRefused(_("The device has no IPv6 address to test."))
    port = opening.port_first
    if port is None:
        raise ProbeRefused(_("An opening of all ports has no port to test; open one port to try."))
    protocols = ("tcp", "udp") if opening.protocol == "both" else (opening.protocol,)
    return [(p, str(opening.device.ipv6), port) for p in protocols]


def _probe_answers(
    settings_row: NetworkSettings, targets: list[tuple[str, str, int]]
) -> list[tuple[bool, str, dict[str, Any]]]:
    """The probe host's answers, through the app that reaches it (apps/network/extensions.py:
    firewall's SSH transport)."""
    for extension in network_extensions():
        answers = extension.probe_run(
            address=settings_row.probe_address,
            port=settings_row.probe_port,
            ssh_user=settings_row.probe_user,
            targets=targets,
        )
        if answers is not None:
            return answers
    raise ProbeUnreachable(_("no app reaches a probe host"))


def _run(
    *, actor: User, member_id: int, obj: Any, targets: list[tuple[str, str, int]]
) -> list[ProbeResult]:
    settings_row = NetworkSettings.load()
    if not settings_row.probe_address:
        raise ProbeRefused(_("No probe host is configured; ask the network team."))
    spelled = ",".join(f"{proto}/{address}/{port}" for proto, address, port in targets)
    key = f"portal:probe:result:{obj._meta.model_name}:{obj.pk}:{hashlib.sha256(spelled.encode()).hexdigest()[:16]}"
    cached = cache.get(key)
    if cached is not None:
        return [ProbeResult(**{**r, "cached": True}) for r in cached]
    if not has_role(actor, *STAFF_ROLES):
        limit = settings_row.forward_tests_per_hour
        cache.add(_rate_key(member_id), 0, 3600)
        used = cache.incr(_rate_key(member_id))
        if used > limit:
            raise ProbeRefused(
                _("You may test %(n)d times an hour; please try again later.") % {"n": limit}
            )
    results = []
    try:
        answers = _probe_answers(settings_row, targets)
    except ProbeUnreachable as exc:
        raise ProbeRefused(_("The probe host does not answer: %(e)s") % {"e": exc}) from None
    for (protocol, address, port), (ok, message, data) in zip(targets, answers, strict=False):
        if not ok or data.get("result") not in RESULTS:
            raise ProbeRefused(_("The probe host refused: %(m)s") % {"m": message})
        results.append(ProbeResult(protocol, address, port, data["result"], data.get("rtt_ms")))
    cache.set(key, [r.__dict__ | {"cached": False} for r in results], CACHE_SECONDS)
    audit_record(
        actor=actor,
        action=f"{obj._meta.model_name}.probe",
        obj=obj,
        changes={"result": [None, ", ".join(f"{r.protocol} {r.result}" for r in results)]},
    )
    return results


def forward_probe(*, actor: User, forward: PortForward) -> list[ProbeResult]:
    """Test one port forward from outside (its first public port, per protocol)."""
    return _run(
        actor=actor, member_id=forward.member_id, obj=forward, targets=_targets_of_forward(forward)
    )


def opening_probe(*, actor: User, opening: Ipv6Opening) -> list[ProbeResult]:
    """Test one IPv6 opening from outside (its first port, per protocol)."""
    return _run(
        actor=actor,
        member_id=opening.device.member_id,
        obj=opening,
        targets=_targets_of_opening(opening),
    )
