"""The health app's part in the firewall pages and rollout (apps/firewall/extensions.py): each
host's state and warnings on the Firewalls page, one host's newest sample, charts and quota hits,
and the VRRP roles the rollout reads to push the backup first."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from apps.firewall.extensions import FirewallExtension, Roles
from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.health.selectors import firewall_host_states, host_health_series, quota_hit_members
from apps.health.services import host_warnings


class HealthFirewallExtension(FirewallExtension):
    def host_list_context(self) -> dict[str, Any]:
        return {"states": firewall_host_states()}

    def host_detail_context(self, *, host: FirewallHost) -> dict[str, Any]:
        sample = host.health_samples.first()
        state = next((st for st in firewall_host_states() if st.host.pk == host.pk), None)
        return {
            "sample": sample,
            "warnings": state.warnings if state else host_warnings(host=host, sample=sample),
            "state": state,
            "quota_hits": quota_hit_members(sample),
            # The charts draw times in the portal's zone, not the browser's.
            "series": {**host_health_series(host=host), "tz": timezone.get_current_timezone_name()},
        }

    def host_roles(self, *, hosts: list[FirewallHost]) -> dict[int, Roles]:
        roles: dict[int, Roles] = {}
        for host in hosts:
            sample = HostHealthSample.objects.filter(host_id=host.pk).order_by("-at", "-id").first()
            if sample is not None and sample.reachable:
                roles[host.pk] = {
                    name: (info or {}).get("state")
                    for name, info in ((sample.ha or {}).get("instances") or {}).items()
                }
        return roles
