"""Pushing compiled rule sets to the lab firewalls over SSH, host by host."""

from __future__ import annotations

import json

import pytest
from lab_support import LAB_VAR, fw, lab_sh, run, wait_for
from push_support import version

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, PushLogEntry
from apps.firewall.order import ruleset_rollout
from apps.firewall.push import ALREADY_RUNS
from apps.firewall.transport import FirewallSession, FirewallUnreachable

pytestmark = [pytest.mark.lab, pytest.mark.django_db]


def loaded(host: str) -> str | None:
    return fw(host, "version").data["version"]


def test_rollout_applies_and_confirms_on_every_host(hosts):
    versions = [version(h) for h in hosts]
    outcomes = ruleset_rollout(versions=versions)
    assert [o.ok for o in outcomes] == [True, True], outcomes
    for host, v in zip(hosts, versions, strict=True):
        host.refresh_from_db()
        assert host.push_status == PushStatus.APPLIED
        assert host.applied_version == v
        assert loaded(host.name) == v.content_hash
        assert fw(host.name, "version").data["pending_confirm"] in (False, None)
        steps = list(
            PushLogEntry.objects.filter(host=host).order_by("id").values_list("step", "ok")
        )
        # One round trip checks, applies (nft and tc together) and reads back; one confirms.
        assert steps == [
            ("connect", True),
            ("check", True),
            ("apply", True),
            ("health", True),
            ("confirm", True),
        ]
        assert host.confirmed_digest["total"]  # what the host read back right after the apply
        assert any(part.startswith("nft:") for part in host.confirmed_digest["parts"])
    # The same content again is not pushed again.
    again = ruleset_rollout(versions=[version(h) for h in hosts])
    assert all(o.skipped for o in again)


def helper_events(host: str) -> list[str]:
    """What the helper on `host` logged (check, apply, confirm, rollback...)."""
    log = LAB_VAR / host / "fw" / "log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["event"] for line in lines]


def test_a_refused_rule_set_reaches_no_host(hosts):
    good = [version(h) for h in hosts]
    ruleset_rollout(versions=good)
    second_events = helper_events("pl-nat2")
    broken = (
        "table inet portal_fw {\n\tchain input { type filter hook input priority 0; bogus; }\n}\n"
    )
    bad = [version(h, nft_text=broken) for h in hosts]
    outcomes = ruleset_rollout(versions=bad)
    assert len(outcomes) == 1
    assert outcomes[0].step == "check"
    assert "refused" in outcomes[0].message
    first, second = (FirewallHost.objects.get(pk=h.pk) for h in hosts)
    assert first.push_status == PushStatus.ERROR
    assert "bogus" in first.error_reason or "syntax" in first.error_reason.lower()
    assert second.push_status == PushStatus.PENDING
    assert not PushLogEntry.objects.filter(host=second, version__in=bad).exists()
    assert helper_events("pl-nat2") == second_events  # connected to early, but no verb ran
    assert helper_events("pl-nat1")[-1] == "bundle-refused-by-check"
    for host, v in zip(hosts, good, strict=True):
        assert loaded(host.name) == v.content_hash  # still the last good version


def test_unreachable_host_waits_and_the_other_is_updated(hosts):
    assert lab_sh("sshd-stop", "nat1").returncode == 0
    versions = [version(h) for h in hosts]
    outcomes = ruleset_rollout(versions=versions)
    assert [(o.host, o.ok, o.unreachable) for o in outcomes] == [
        ("pl-nat1", False, True),
        ("pl-nat2", True, False),
    ]
    assert FirewallHost.objects.get(name="pl-nat1").push_status == PushStatus.UNREACHABLE
    assert loaded("pl-nat2") == versions[1].content_hash
    # It returns: the next rollout converges.
    assert lab_sh("sshd-start", "nat1").returncode == 0
    hosts = list(FirewallHost.objects.order_by("rollout_order"))
    outcomes = ruleset_rollout(versions=[version(h) for h in hosts])
    assert [(o.ok, o.skipped) for o in outcomes] == [(True, False), (True, True)]
    assert loaded("pl-nat1") == versions[0].content_hash


def test_failing_health_rolls_the_host_back_and_stops(hosts, settings):
    good = [version(h) for h in hosts]
    ruleset_rollout(versions=good)
    newer = [version(h, port=9090) for h in FirewallHost.objects.order_by("rollout_order")]
    settings.PORTAL_HEALTH_CONNTRACK_MAX_RATIO = -1.0  # every host now counts as unhealthy
    outcomes = ruleset_rollout(versions=newer)
    assert len(outcomes) == 1
    assert outcomes[0].step == "health"
    assert "the host restored its previous bundle" in outcomes[0].message
    assert loaded("pl-nat1") == good[0].content_hash
    assert loaded("pl-nat2") == good[1].content_hash
    assert FirewallHost.objects.get(name="pl-nat2").push_status == PushStatus.PENDING


def test_a_portal_that_disappears_before_the_confirm_is_reverted(hosts, settings, monkeypatch):
    good = [version(h) for h in hosts]
    ruleset_rollout(versions=good)
    settings.PORTAL_FIREWALL_CONFIRM_WITHIN = 2
    call = FirewallSession.call

    def lost_before_confirm(self, verb, *args, **kwargs):
        if verb == "confirm":
            raise FirewallUnreachable("confirm: connection lost")
        return call(self, verb, *args, **kwargs)

    monkeypatch.setattr(FirewallSession, "call", lost_before_confirm)
    newer = [version(h, port=9090) for h in FirewallHost.objects.order_by("rollout_order")]
    outcomes = ruleset_rollout(versions=newer)
    # The new rule set may be what cut the connection: it goes no further than this host.
    assert [(o.host, o.ok, o.unreachable) for o in outcomes] == [("pl-nat1", False, False)]
    assert "reverts by itself" in outcomes[0].message
    assert "rollout stops" in outcomes[0].message
    assert loaded("pl-nat1") == newer[0].content_hash  # applied, but never confirmed
    assert loaded("pl-nat2") == good[1].content_hash  # never touched
    assert FirewallHost.objects.get(name="pl-nat1").push_status == PushStatus.ERROR
    assert FirewallHost.objects.get(name="pl-nat2").push_status == PushStatus.PENDING
    assert wait_for(lambda: loaded("pl-nat1") == good[0].content_hash, timeout=8)


def test_staff_rollback_puts_an_older_version_back_and_holds_it(
    hosts, django_capture_on_commit_callbacks
):
    from apps.firewall.services import host_pin, host_unpin
    from workers.firewall import host_rollback as host_rollback_task

    first = [version(h) for h in hosts]
    ruleset_rollout(versions=first)
    second = [version(h, port=9090) for h in FirewallHost.objects.order_by("rollout_order")]
    ruleset_rollout(versions=second)
    assert loaded("pl-nat1") == second[0].content_hash
    with django_capture_on_commit_callbacks(execute=False):
        host_pin(host=hosts[0], version=first[0], actor=None)
    host_rollback_task(hosts[0].pk, first[0].pk)  # what the worker runs
    assert loaded("pl-nat1") == first[0].content_hash
    assert FirewallHost.objects.get(name="pl-nat1").applied_version_id == first[0].pk
    assert loaded("pl-nat2") == second[1].content_hash  # only that host
    # Held: the next automatic rollout skips the pinned host and says so.
    third = [version(h, port=9191) for h in FirewallHost.objects.order_by("rollout_order")]
    outcomes = ruleset_rollout(versions=third)
    assert outcomes[0].skipped
    assert f"pinned to #{first[0].pk}" in outcomes[0].message
    assert loaded("pl-nat1") == first[0].content_hash
    assert loaded("pl-nat2") == third[1].content_hash
    # Unpinned: the newest version reaches it again.
    with django_capture_on_commit_callbacks(execute=False):
        host_unpin(host=FirewallHost.objects.get(name="pl-nat1"), actor=None)
    outcomes = ruleset_rollout(
        versions=[version(h, port=9191) for h in FirewallHost.objects.order_by("rollout_order")]
    )
    assert loaded("pl-nat1") == third[0].content_hash


def test_pushes_reuse_the_open_connection_and_notice_when_it_is_gone(hosts):
    """The worker keeps its SSH connections open between pushes (no handshake on the way to the
    hosts); a host whose sshd restarted, or whose link went silent, gets a new connection or
    is reported unreachable, never a hang."""
    from apps.firewall.transport import POOL

    POOL.close()
    before = POOL.handshakes

    def push(port: int) -> list[tuple[str, bool, bool]]:
        live = list(FirewallHost.objects.order_by("rollout_order"))
        outcomes = ruleset_rollout(versions=[version(h, port=port) for h in live])
        return [(o.host, o.ok, o.unreachable) for o in outcomes]

    both_ok = [("pl-nat1", True, False), ("pl-nat2", True, False)]
    assert push(8081) == both_ok
    assert POOL.handshakes - before == 2
    assert push(8082) == both_ok
    assert POOL.handshakes - before == 2  # the same two connections
    assert loaded("pl-nat1") == version(hosts[0], port=8082).content_hash

    # sshd restarted on nat1 (its sessions ended): the next push connects again.
    assert lab_sh("sshd-stop", "nat1").returncode == 0
    assert lab_sh("sshd-start", "nat1").returncode == 0
    assert push(8083) == both_ok
    assert POOL.handshakes - before == 3

    # nat1's link goes silent (no reset, no answer): the open connection is given up after the
    # connect time-out, a new one times out too, the host is unreachable and nat2 is updated.
    ip = ("ip", "-n", "pl-nat1", "link", "set", "mgmt0")
    try:
        assert run(*ip, "down").returncode == 0
        assert push(8084) == [("pl-nat1", False, True), ("pl-nat2", True, False)]
    finally:
        run(*ip, "up")
    assert wait_for(lambda: push(8085) == both_ok, 20)
    assert loaded("pl-nat1") == version(hosts[0], port=8085).content_hash


def test_the_warm_up_opens_the_connections_the_first_rollout_uses(hosts):
    from apps.firewall.compiled import compiled_warm
    from apps.firewall.transport import POOL

    POOL.close()
    before = POOL.handshakes
    compiled_warm(connect=True)  # what the firewall worker runs at start
    assert POOL.handshakes - before == 2
    outcomes = ruleset_rollout(versions=[version(h, port=8090) for h in hosts])
    assert [(o.ok, o.skipped) for o in outcomes] == [(True, False), (True, False)]
    assert POOL.handshakes - before == 2  # no handshake on the way to the hosts


def test_a_host_that_already_runs_the_bundle_is_not_pushed_in_full_again(hosts):
    """Issue 26: the portal forgot what the hosts run (a new database, `make run` again over a
    running lab): a host whose agent runs this very bundle, confirmed, with the content it read
    back then, is recorded as running it instead of getting a full push; one whose content
    drifted gets the full push."""
    versions = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=versions))
    FirewallHost.objects.update(push_status=PushStatus.PENDING, applied_version=None,
                                applied_checksum="", confirmed_digest={})  # fmt: skip
    # pl-nat2's content changed by hand since its apply: it needs the push.
    run("ip", "netns", "exec", "pl-nat2", "nft", "add", "table", "inet", "portal_handmade")
    events_before = {h.name: helper_events(h.name).count("bundle-applied") for h in hosts}
    outcomes = {o.host: o for o in ruleset_rollout(versions=[version(h) for h in hosts])}
    nat1, nat2 = outcomes["pl-nat1"], outcomes["pl-nat2"]
    assert (nat1.ok, nat1.skipped, nat1.message) == (True, True, ALREADY_RUNS), nat1
    assert (nat2.ok, nat2.skipped) == (True, False), nat2
    events_after = {h.name: helper_events(h.name).count("bundle-applied") for h in hosts}
    assert events_after["pl-nat1"] == events_before["pl-nat1"]  # nothing sent to pl-nat1
    assert events_after["pl-nat2"] == events_before["pl-nat2"] + 1
    for host in FirewallHost.objects.all():
        assert host.push_status == PushStatus.APPLIED, host.error_reason
        assert host.applied_checksum == loaded(host.name)
        assert host.confirmed_digest["parts"]  # the drift check compares with it from now on
    run("ip", "netns", "exec", "pl-nat2", "nft", "delete", "table", "inet", "portal_handmade")
