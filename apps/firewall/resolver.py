"""The members' resolver of each site, from the database: the compiler's `Resolver` input and
the DNS servers a site's leases name (docs/dns.md).

A host with a `resolver_address` runs Unbound on that (its own, member-side) address. A site's
leases name every resolver of the site in rollout order, so both hosts of a pair serve at once;
a site without one hands out `DhcpSettings.dns_servers` (an external resolver) as before. The
rule set's `dns4` set (untracked DNS, the walled garden's way to DNS) holds both kinds.
"""

from __future__ import annotations

from apps.firewall.extensions import DhcpRead
from apps.firewall.models import FirewallHost
from workers import ruleset as rs
from workers.ruleset.host import Resolver


def site_resolver_addresses(site_id: int | None) -> tuple[str, ...]:
    """The resolver addresses of the site's enabled hosts, in rollout order."""
    if site_id is None:
        return ()
    rows = (
        FirewallHost.objects.filter(site_id=site_id, enabled=True, resolver_address__isnull=False)
        .order_by("rollout_order", "name")
        .values_list("resolver_address", flat=True)
    )
    return tuple(dict.fromkeys(str(a) for a in rows))


def all_resolver_addresses() -> tuple[str, ...]:
    """Every enabled host's resolver address (the rule set's dns4 set holds them)."""
    rows = FirewallHost.objects.filter(enabled=True, resolver_address__isnull=False)
    return tuple(dict.fromkeys(str(a) for a in rows.values_list("resolver_address", flat=True)))


def lease_dns_servers(host: FirewallHost, dhcp: DhcpRead) -> tuple[str, ...]:
    """What Kea on `host` hands out as DNS servers: the site's resolvers, else the settings'."""
    return site_resolver_addresses(host.site_id) or dhcp.dns_servers


def resolver_build(
    host: FirewallHost, dhcp: DhcpRead, private: tuple[str, ...], registration: tuple[str, ...]
) -> Resolver | None:
    """Unbound's input for `host`, or None when it runs no resolver. It serves the site's member
    network, the private networks of its buildings and their registration ranges (walled
    devices resolve too); everything else is refused."""
    if not host.resolver_address:
        return None
    site = host.site
    allow = [*private, *registration]
    if site.member_network4:
        allow.append(str(site.member_network4))
    if not allow:
        raise rs.SnapshotError(f"host {host.name}: its resolver has no member network to serve")
    local_name = ""
    if dhcp.captive_portal_url:
        local_name = rs.CaptivePortalUrl(dhcp.captive_portal_url).origin.split("://")[1]
        local_name = local_name.partition(":")[0]
    portal = dhcp.portal_addresses
    return Resolver(
        listen=(host.resolver_address,),
        allow=tuple(dict.fromkeys(allow)),
        ratelimit=dhcp.resolver_ratelimit,
        forwarders=dhcp.resolver_forwarders,
        local_name=local_name if portal else "",
        local_addresses=portal if local_name else (),
        control_socket=host.unbound_control_socket,
        pid_file=host.unbound_pid_file,
        username=host.unbound_user,
    )
