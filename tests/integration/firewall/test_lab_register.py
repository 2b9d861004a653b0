"""`manage.py lab_register`: the lab's hosts become firewall hosts, idempotently."""

import json

import pytest
from django.core.management import CommandError, call_command

from apps.firewall.models import FirewallHost

pytestmark = pytest.mark.django_db

LAB = {
    "user": "root",
    "port": 22,
    "hosts": [
        {"name": "pl-nat1", "address": "10.255.255.11"},
        {"name": "pl-nat2", "address": "10.255.255.12"},
    ],
    "interfaces": {"member_side": "dorm0", "internet_side": "inet0"},
}


def test_registers_both_hosts_in_order_and_again_changes_nothing(tmp_path):
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(LAB))
    call_command("lab_register", file=str(path), no_devices=True)
    call_command("lab_register", file=str(path), no_devices=True)
    rows = list(FirewallHost.objects.values_list("name", "address", "rollout_order"))
    assert rows == [("pl-nat1", "10.255.255.11", 0), ("pl-nat2", "10.255.255.12", 1)]


def test_missing_or_broken_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="build the lab first"):
        call_command("lab_register", file=str(tmp_path / "none.json"), no_devices=True)
    broken = tmp_path / "lab.json"
    broken.write_text('{"hosts": [{"name": "x", "address": "not-an-ip"}]}')
    with pytest.raises(CommandError, match="'not-an-ip' is not an IPv4 or IPv6 address"):
        call_command("lab_register", file=str(broken), no_devices=True)
    assert not FirewallHost.objects.exists()


def test_firewall_push_queues_a_run_or_reports_failures_now(settings, firewall_redis_clean):
    from apps.firewall.pipeline import firewall_causes_take

    settings.PORTAL_FIREWALL_DEBOUNCE = 30
    settings.PORTAL_FIREWALL_SSH_KEY = "/nonexistent/key"
    ghost = FirewallHost.objects.create(name="ghost", address="127.0.0.1", port=1)
    call_command("firewall_push", cause="test push")
    assert firewall_causes_take(ghost.site_id) == (["test push"], [])
    # --now against a host nobody answers for: a clear failure, not a traceback.
    with pytest.raises(CommandError, match="not every firewall runs the new rule set"):
        call_command("firewall_push", now=True)
    assert FirewallHost.objects.get(name="ghost").push_status == "unreachable"


def test_health_beat_asks_for_a_run_while_a_host_is_behind(settings, firewall_redis_clean):
    from apps.firewall.pipeline import firewall_causes_take
    from workers.health import firewall_health_collect

    settings.PORTAL_FIREWALL_SSH_KEY = "/nonexistent/key"
    host = FirewallHost.objects.create(name="new-host", address="127.0.0.1", port=1)
    firewall_health_collect()
    assert "convergence (health check)" in firewall_causes_take(host.site_id)[0]


def test_health_beat_runs_changes_whose_run_was_lost(settings, firewall_redis_clean):
    from apps.firewall.pipeline import causes_key, firewall_causes_take
    from apps.infra.redis import redis_client
    from workers.health import firewall_health_collect

    settings.PORTAL_FIREWALL_SSH_KEY = "/nonexistent/key"
    host = FirewallHost.objects.create(name="current", address="127.0.0.1", port=1)
    _applied(host, "a")  # up to date: nothing is behind, yet the change must not wait
    redis_client().rpush(causes_key(host.site_id), "device.add 1 (by resident)")  # not scheduled
    firewall_health_collect()
    assert "pending changes (health check)" in firewall_causes_take(host.site_id)[0]


def test_health_beat_compiles_a_site_left_alone_too_long(settings, firewall_redis_clean):
    """Redis lost a change's record and its run (an outage longer than the retries): nothing
    in Redis says a change waits, yet the database does; the health beat compiles the site
    once no run did for PORTAL_FIREWALL_RECONCILE_INTERVAL, and not before."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.firewall.models import RuleSetVersion
    from apps.firewall.pipeline import firewall_causes_take
    from workers.health import firewall_health_collect

    settings.PORTAL_FIREWALL_SSH_KEY = "/nonexistent/key"
    settings.PORTAL_FIREWALL_RECONCILE_INTERVAL = 300
    host = FirewallHost.objects.create(name="quiet", address="127.0.0.1", port=1)
    version = _applied(host, "b")
    firewall_health_collect()
    assert firewall_causes_take(host.site_id)[0] == []  # compiled just now: nothing to do

    RuleSetVersion.objects.filter(pk=version.pk).update(
        snapshot_at=timezone.now() - timedelta(seconds=301)
    )
    firewall_health_collect()
    assert firewall_causes_take(host.site_id)[0] == ["reconcile (health check)"]

    settings.PORTAL_FIREWALL_RECONCILE_INTERVAL = 0  # switched off
    firewall_health_collect()
    assert firewall_causes_take(host.site_id)[0] == []


def _applied(host: FirewallHost, char: str):
    """Store a (content-free) version for `host` and mark it applied there."""
    from apps.firewall.versions import ruleset_version_store

    version = ruleset_version_store(
        host=host,
        nft_text="",
        tc_text="",
        content_hash=char * 64,
        counts={},
        compile_seconds=0,
        cause="test",
    )
    host.mark_applied(version)
    return version


def test_a_stream_of_delta_versions_does_not_put_the_reconcile_off(settings, firewall_redis_clean):
    """The reconcile counts full compiles only: a site whose members change every minute (each
    change a delta version, `texts_pending` until a full compile renders it) is still compiled
    from the database once its last full compile is older than the interval; a site with a
    recent full compile is not picked."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.firewall.models import RuleSetVersion, Site
    from apps.firewall.pipeline import firewall_causes_take
    from apps.health.services import sites_not_compiled_since
    from workers.health import firewall_health_collect

    settings.PORTAL_FIREWALL_SSH_KEY = "/nonexistent/key"
    settings.PORTAL_FIREWALL_RECONCILE_INTERVAL = 300
    busy = FirewallHost.objects.create(name="busy", address="127.0.0.1", port=1)
    quiet_site = Site.objects.create(name="quiet-site")
    quiet = FirewallHost.objects.create(name="quiet", address="127.0.0.2", port=1, site=quiet_site)
    now = timezone.now()
    full = _applied(busy, "c")
    RuleSetVersion.objects.filter(pk=full.pk).update(snapshot_at=now - timedelta(seconds=600))
    for minute, char in enumerate("def"):  # a change a minute since: delta versions
        delta = _applied(busy, char)
        RuleSetVersion.objects.filter(pk=delta.pk).update(
            texts_pending=True, snapshot_at=now - timedelta(seconds=60 * (3 - minute))
        )
    recent = _applied(quiet, "a")
    RuleSetVersion.objects.filter(pk=recent.pk).update(snapshot_at=now - timedelta(seconds=60))

    assert sites_not_compiled_since({busy.site_id, quiet.site_id}) == [busy.site_id]
    firewall_health_collect()
    assert firewall_causes_take(busy.site_id)[0] == ["reconcile (health check)"]
    assert firewall_causes_take(quiet.site_id)[0] == []
