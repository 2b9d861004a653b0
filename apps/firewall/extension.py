"""The firewall app's part in network's pages and writes (apps/network/extensions.py): a
committed change asks the pipeline to run, each row's live state comes from the confirmed
bundles (live.py), and "Test my forward" reaches the probe host over the SSH transport."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from apps.firewall import live
from apps.firewall.pipeline import firewall_change_request
from apps.firewall.transport import FirewallUnreachable, session_for
from apps.network.extensions import NetworkExtension, ProbeAnswer, ProbeUnreachable, Target


class FirewallNetworkExtension(NetworkExtension):
    def network_changed(self, *, cause: str) -> None:
        firewall_change_request(cause=cause)

    def live_hosts(self) -> live.LiveHosts:
        return live.live_hosts()

    def live_attach(self, rows: Iterable[Any], *, hosts: Any = None) -> bool:
        return live.live_attach(rows, hosts=hosts)

    def probe_run(
        self, *, address: str, port: int, ssh_user: str, targets: list[Target]
    ) -> list[ProbeAnswer]:
        host = SimpleNamespace(address=address, port=port, ssh_user=ssh_user)
        answers: list[ProbeAnswer] = []
        try:
            with session_for(host, agent=False) as session:
                for protocol, target, target_port in targets:
                    reply = session.call("probe", protocol, target, str(target_port), timeout=20)
                    answers.append((reply.ok, reply.message, reply.data))
                    if not reply.ok:
                        break  # the probe host refused: the rest would not be asked
        except FirewallUnreachable as exc:
            raise ProbeUnreachable(str(exc)) from None
        return answers
