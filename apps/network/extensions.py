"""How the apps built on network take part in its pages and writes, without network importing them.

network is a lower floor: devices, addresses, forwards, openings, the policy. firewall (the
pipeline to the hosts, the live state of each row, the SSH transport) and dhcp (leases) stand on
it and import it; network imports neither (the import-linter contract in pyproject.toml keeps
it so). Where network needs their part, it asks every registered `NetworkExtension`, in the
order the apps registered them (their AppConfig.ready(), in INSTALLED_APPS order: firewall,
dhcp). The same style as apps/members/extensions.py.

- `network_changed`: after the commit of a change the firewalls enforce (apps/network/hooks.py);
  firewall: every site compiles and pushes.
- `live_hosts`, `live_attach`: whether the hosts confirmed a bundle carrying each row
  (firewall: apps/firewall/live.py); without a firewall app no row is ever live.
- `devices_shown`: what an app shows beside each device row (dhcp: its newest lease).
- `probe_run`: "Test my forward" runs on the probe host (firewall: over its SSH transport).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apps.network.models import Device

Target = tuple[str, str, int]  # (protocol, address, port) the probe host connects to
ProbeAnswer = tuple[bool, str, dict[str, Any]]  # (ok, message, data) of one probe


class ProbeUnreachable(Exception):
    """The probe host did not answer (its text says why)."""


class NetworkExtension:
    """One app's part in network's pages and writes; every method does nothing by default."""

    def network_changed(self, *, cause: str) -> None:
        """A committed change of network state (`cause` names it and who made it)."""

    def live_hosts(self) -> Any:
        """One read of the hosts, handed to `live_attach` for every section of a page; None
        when this app does not tell live states."""
        return None

    def live_attach(self, rows: Iterable[Any], *, hosts: Any = None) -> bool | None:
        """Set `row.live` on each row; True while one is still waiting for a host. None when
        this app does not tell live states."""
        return None

    def devices_shown(self, *, devices: list[Device]) -> None:
        """Attach what this app shows beside each device row (dhcp: `device.lease`)."""

    def probe_run(
        self, *, address: str, port: int, ssh_user: str, targets: list[Target]
    ) -> list[ProbeAnswer] | None:
        """Run the probe host's `probe` for each target, one answer each (raises
        ProbeUnreachable); None when this app cannot reach a probe host."""
        return None


_extensions: list[NetworkExtension] = []


def network_extension_register(extension: NetworkExtension) -> None:
    """Add an app's part (from its AppConfig.ready(); once per class)."""
    if not any(type(known) is type(extension) for known in _extensions):
        _extensions.append(extension)


def network_extensions() -> tuple[NetworkExtension, ...]:
    """The registered parts, in registration order."""
    return tuple(_extensions)


def live_hosts() -> Any:
    """The first answer of `NetworkExtension.live_hosts` (None: no app tells live states)."""
    for extension in _extensions:
        if (hosts := extension.live_hosts()) is not None:
            return hosts
    return None


def live_attach(rows: Iterable[Any], *, hosts: Any = None) -> bool:
    """Each row's live state as `row.live` (see `NetworkExtension.live_attach`); True while one
    is still waiting for a host."""
    rows = list(rows)
    for extension in _extensions:
        if (waiting := extension.live_attach(rows, hosts=hosts)) is not None:
            return waiting
    return False


def devices_shown(devices: list[Device]) -> None:
    """What every app shows beside the device rows."""
    for extension in _extensions:
        extension.devices_shown(devices=devices)
