"""Staff actions on the firewalls: push now, put a version back and hold it, unpin (audited;
the worker on the firewall queue does the pushing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.audit.services import audit_record
from apps.firewall import dispatch
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.pipeline import firewall_change_request, push_request_start
from apps.firewall.transport import FirewallUnreachable, session_for

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def firewall_push_now(*, actor: User) -> str:
    """Staff ask for a compile and rollout of every site now (audited; runs in the worker).
    Returns the request id whose outcome each site's run reports (`push_request_outcome`)."""
    hosts = list(FirewallHost.objects.filter(enabled=True).select_related("site"))
    for host in hosts:
        audit_record(actor=actor, action="firewall.push_now", obj=host)
    sites = sorted({h.site for h in hosts}, key=lambda s: s.name)
    request_id = push_request_start(site_names=[s.name for s in sites])
    cause = f"push now (by {actor.get_username()})"
    site_ids = [s.pk for s in sites]
    transaction.on_commit(
        lambda: firewall_change_request(
            cause=cause, force=True, site_ids=site_ids, request_id=request_id
        )
    )
    return request_id


class PinRefused(Exception):
    """The version cannot be put back on that host."""


@transaction.atomic
def host_pin(*, host: FirewallHost, version: RuleSetVersion, actor: User) -> None:
    """Put `version` back on `host` and hold it there: automatic pushes skip the host until
    someone unpins it (audited; the worker pushes it under the site's lock)."""
    host = FirewallHost.objects.select_for_update().get(pk=host.pk)
    if version.host_id != host.pk:
        raise PinRefused("that version belongs to another host")
    if version.applied_as_increment:
        raise PinRefused(
            (
                _(
                    "Version #%(n)s was pushed as an increment and the host runs it: its texts "
                    "are stored by the next full compile of this host (“Push now” on the "
                    "Firewalls page compiles every site in full)."
                )
                if version.content_hash == host.applied_checksum
                else _(
                    "Version #%(n)s was pushed as an increment and a later change replaced it "
                    "before a full compile stored its texts: it cannot be put back."
                )
            )
            % {"n": version.pk}
        )
    if version.texts_pending:
        raise PinRefused(
            _(
                "Version #%(n)s was never stored completely (its worker stopped before writing "
                "the texts); it cannot be put back."
            )
            % {"n": version.pk}
        )
    audit_record(
        actor=actor,
        action="firewall.pin",
        obj=host,
        changes={"version": [host.applied_version_id, version.pk]},
    )
    host.pinned_version = version
    host.pinned_by = actor if getattr(actor, "pk", None) else None
    host.pinned_at = timezone.now()
    host.save(update_fields=["pinned_version", "pinned_by", "pinned_at"])
    actor_id = getattr(actor, "pk", None)
    transaction.on_commit(lambda: dispatch.host_rollback(host.pk, version.pk, actor_id))


@transaction.atomic
def host_unpin(*, host: FirewallHost, actor: User) -> None:
    """Release a pinned host: its site compiles and pushes the newest version (audited)."""
    host = FirewallHost.objects.select_for_update().get(pk=host.pk)
    if host.pinned_version_id is None:
        return
    audit_record(
        actor=actor,
        action="firewall.unpin",
        obj=host,
        changes={"pinned_version": [host.pinned_version_id, None]},
    )
    host.pinned_version = None
    host.pinned_by = None
    host.pinned_at = None
    host.save(update_fields=["pinned_version", "pinned_by", "pinned_at"])
    who = actor.get_username() if getattr(actor, "pk", None) else "system"
    cause = f"unpinned {host.name} (by {who})"
    site_id = host.site_id
    transaction.on_commit(
        lambda: firewall_change_request(cause=cause, force=True, site_ids=[site_id])
    )


def host_state_resync(*, host: FirewallHost, actor: User) -> dict:
    """Ask the peer's conntrackd for a full resync of the connection states into `host`
    (staff action after a sync problem; audited). Returns the host's failover state."""

    if not host.sync_interface:
        raise ValueError(_("%(host)s is not one of a pair.") % {"host": host.name})
    try:
        with session_for(host) as session:
            reply = session.call("ha-resync", timeout=60)
    except FirewallUnreachable as exc:
        raise ValueError(str(exc)) from None
    if not reply.ok:
        raise ValueError(reply.message)
    audit_record(actor=actor, action="firewall.state_resync", obj=host, changes={})
    return reply.data.get("ha") or {}
