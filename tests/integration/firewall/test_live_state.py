"""Live state of a row: pending until a host confirms a version compiled after the change."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.firewall.live import live_states
from apps.firewall.models import FirewallHost, PushLogEntry
from apps.firewall.versions import ruleset_version_store
from tests.factories import READ_BACK

pytestmark = pytest.mark.django_db


def confirm(host, *, snapshot_at, at):
    version = ruleset_version_store(
        host=host,
        nft_text=f"v {snapshot_at}",
        tc_text="",
        content_hash=str(at.timestamp()).rjust(64, "0"),
        counts={},
        compile_seconds=0,
        cause="t",
        snapshot_at=snapshot_at,
    )
    host.mark_applied(version, digest=READ_BACK)
    PushLogEntry.objects.create(host=host, version=version, step="confirm", ok=True, at=at)
    return version


def test_pending_then_live_on_each_host_then_live_everywhere():
    t0 = timezone.now()
    nat1 = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    nat2 = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1)
    changed = t0
    state = live_states(changed_at={"row": changed})["row"]
    assert state.state == "pending"
    assert [h.state for h in state.hosts] == ["pending", "pending"]

    confirm(nat1, snapshot_at=t0 - timedelta(seconds=1), at=t0 + timedelta(seconds=1))  # too old
    assert live_states(changed_at={"row": changed})["row"].state == "pending"

    confirm(nat1, snapshot_at=t0 + timedelta(seconds=1), at=t0 + timedelta(seconds=2))
    state = live_states(changed_at={"row": changed})["row"]
    assert [(h.host, h.state) for h in state.hosts] == [("pl-nat1", "live"), ("pl-nat2", "pending")]
    assert state.hosts[0].since == t0 + timedelta(seconds=2)

    confirm(nat2, snapshot_at=t0 + timedelta(seconds=1), at=t0 + timedelta(seconds=3))
    confirm(nat1, snapshot_at=t0 + timedelta(seconds=5), at=t0 + timedelta(seconds=6))  # later
    state = live_states(changed_at={"row": changed})["row"]
    assert state.state == "live"
    assert state.since == t0 + timedelta(seconds=3)  # live on all since the last host took it
    assert state.hosts[0].since == t0 + timedelta(seconds=2)  # first confirmation that carried it


def test_a_failed_push_after_the_change_says_why_and_a_rollback_makes_it_pending_again():
    t0 = timezone.now()
    nat1 = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    old = confirm(nat1, snapshot_at=t0 - timedelta(seconds=10), at=t0 - timedelta(seconds=9))
    nat1.mark_error("check: the host refused the rule set: Error: syntax error")
    state = live_states(changed_at={"row": t0 - timedelta(seconds=1)})["row"]
    assert state.state == "failed"
    assert "syntax error" in state.hosts[0].reason
    confirm(nat1, snapshot_at=t0 + timedelta(seconds=1), at=t0 + timedelta(seconds=2))
    assert live_states(changed_at={"row": t0})["row"].state == "live"
    nat1.mark_applied(old, digest=READ_BACK)  # staff put the old version back
    assert live_states(changed_at={"row": t0})["row"].state == "pending"


def test_many_rows_cost_three_queries(django_assert_num_queries):
    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    now = timezone.now()
    with django_assert_num_queries(3):  # hosts, their sites, confirmations
        states = live_states(changed_at={n: now - timedelta(seconds=n) for n in range(50)})
    assert len(states) == 50


def test_a_host_held_on_an_older_version_is_named_to_the_resident(client):
    """Issue 25: while staff pin a host, a resident's new change is not "waiting for the
    firewalls" forever: the page says that host is held on an older version by the team."""
    from django.urls import reverse

    from tests.factories import forward_add, member_active

    t0 = timezone.now()
    nat1 = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    old = confirm(nat1, snapshot_at=t0 - timedelta(seconds=10), at=t0 - timedelta(seconds=9))
    FirewallHost.objects.filter(pk=nat1.pk).update(pinned_version=old)
    state = live_states(changed_at={"row": t0})["row"]
    assert state.state == "pending"
    assert state.hosts[0].reason == "pinned"
    member = member_active()
    forward_add(member, ports="8080")
    client.force_login(member.user)
    page = client.get(reverse("members:dashboard"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="live-held"' in html
    assert "pl-nat1 is held on an older version by the network team" in html
    german = client.get(reverse("members:dashboard"), HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "pl-nat1 wird vom Netzwerk-Team auf einer älteren Version gehalten" in german


def test_live_since_is_when_the_row_went_live_not_the_latest_push():
    """Issue 25: "live ... since 6:21" showed the latest push. A change that the running
    bundle already carries (a description, a re-save: the compile gives the same content and
    only moves that version's snapshot time on) is live from the moment it was made; a later
    push of other changes does not move its "since"."""
    t0 = timezone.now()
    nat1 = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    running = confirm(nat1, snapshot_at=t0 - timedelta(minutes=10), at=t0 - timedelta(minutes=9))
    changed = t0  # the resident edits the row; the compile gives the running content again
    ruleset_version_store(
        host=nat1,
        nft_text="same",
        tc_text="",
        content_hash=running.content_hash,
        counts={},
        compile_seconds=0,
        cause="t",
        snapshot_at=t0 + timedelta(seconds=1),
    )
    state = live_states(changed_at={"row": changed})["row"]
    assert state.state == "live"
    assert state.since == changed
    # Eleven minutes later someone else's change is pushed: this row's "since" stays.
    confirm(nat1, snapshot_at=t0 + timedelta(minutes=11), at=t0 + timedelta(minutes=11, seconds=1))
    state = live_states(changed_at={"row": changed})["row"]
    assert state.since == changed
    # A row changed before the running version's first confirm went live at that confirm.
    assert live_states(changed_at={"r": t0 - timedelta(minutes=9, seconds=30)})["r"].since == (
        t0 - timedelta(minutes=9)
    )
