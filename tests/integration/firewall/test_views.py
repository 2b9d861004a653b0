"""Firewall status screens: roles, states, warnings, versions and their diff."""

import pytest
from django.urls import reverse

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from apps.firewall.versions import ruleset_version_store
from apps.health.models import HostHealthSample

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def store(host, text, cause="test"):
    return ruleset_version_store(
        host=host,
        nft_text=text,
        tc_text="",
        content_hash=str(hash(text) & 0xFFFFFFFF).rjust(64, "0"),
        counts={},
        compile_seconds=0.0,
        cause=cause,
    )


@pytest.mark.parametrize(
    ("role", "status"), [("member", 403), ("volunteer", 200), ("support", 200), ("admin", 200)]
)
def test_firewall_pages_are_for_staff(client_for, host, role, status):
    client = client_for(role)
    assert client.get(reverse("firewall:host_list")).status_code == status
    assert client.get(reverse("firewall:host_detail", args=[host.name])).status_code == status


def test_list_shows_state_and_threshold_warnings(client_for, host, settings):
    version = store(host, "table inet portal_fw {}\n")
    host.mark_applied(version)
    HostHealthSample.objects.create(
        host=host,
        reachable=True,
        latency_ms=12,
        loaded_version="0" * 64,
        conntrack_count=900,
        conntrack_max=1000,
        softirq_max_share=0.7,
        load1=0.5,
    )
    page = client_for("volunteer").get(reverse("firewall:host_list")).content.decode()
    assert "Connection tracking table 90% full." in page
    assert "Softirq load 70% on one core." in page
    assert "Runs version 000000000000, expected" in page  # drift
    assert 'data-testid="push-status-pl-nat1">applied<' in page


def test_healthy_host_says_ok_and_unreachable_host_says_why(client_for, host):
    version = store(host, "x")
    host.mark_applied(version)
    HostHealthSample.objects.create(
        host=host,
        reachable=True,
        loaded_version=version.content_hash,
        conntrack_count=10,
        conntrack_max=1000,
        softirq_max_share=0.01,
    )
    other = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1)
    HostHealthSample.objects.create(host=other, reachable=False, error="Connection refused")
    client = client_for("support")
    partial = client.get(reverse("firewall:host_list"), HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<section id="host-table"')
    ok_cell = partial.split('data-testid="warnings-pl-nat1"')[1].split("</td>")[0]
    assert "OK" in ok_cell
    assert "Not reachable: Connection refused" in partial


def test_no_hosts_is_an_explained_empty_state(client_for):
    page = client_for("volunteer").get(reverse("firewall:host_list")).content.decode()
    assert "No firewall host is configured" in page


def test_detail_lists_push_log_and_versions_and_diffs_two(client_for, host):
    first = store(host, "table inet portal_fw {\n\tset a {\n\t}\n}\n", cause="first")
    second = store(host, "table inet portal_fw {\n\tset b {\n\t}\n}\n", cause="second")
    PushLogEntry.objects.create(
        host=host, version=second, step="check", ok=False, message="Error: syntax error"
    )
    host.mark_error("check: the host refused the rule set")
    client = client_for("volunteer")
    page = client.get(reverse("firewall:host_detail", args=[host.name])).content.decode()
    assert "Error: syntax error" in page
    assert "check: the host refused the rule set" in page
    assert f"#{first.pk}" in page
    assert f"#{second.pk}" in page
    diff = client.get(
        reverse("firewall:version_diff", args=[host.name]), {"a": first.pk, "b": second.pk}
    ).content.decode()
    assert '<span class="diff-del">-\tset a {</span>' in diff
    assert '<span class="diff-add">+\tset b {</span>' in diff
    assert "<code>nft</code>" in diff
    assert "<code>tc</code>" not in diff  # only artefacts that differ


def test_the_diff_shows_each_artefact_of_the_bundle(client_for, host):
    old = ruleset_version_store(
        host=host,
        nft_text="table inet portal_fw {}\n",
        tc_text="class replace a\n",
        files={"kea-dhcp4": '{"Dhcp4": {}}\n'},
        content_hash="1" * 64,
        counts={},
        compile_seconds=0,
        cause="old",
    )
    new = ruleset_version_store(
        host=host, nft_text="table inet portal_fw {}\n", tc_text="class replace b\n",
        files={"kea-dhcp4": '{"Dhcp4": {"valid-lifetime": 600}}\n', "keepalived": "vrrp\n"},
        content_hash="2" * 64, counts={}, compile_seconds=0, cause="new",
    )  # fmt: skip
    diff = client_for("support").get(
        reverse("firewall:version_diff", args=[host.name]), {"a": old.pk, "b": new.pk}
    )
    text = diff.content.decode()
    assert [a for a in ("nft", "tc", "kea-dhcp4", "keepalived") if f"<code>{a}</code>" in text] == [
        "tc",
        "kea-dhcp4",
        "keepalived",
    ]
    assert '<span class="diff-add">+class replace b</span>' in text
    assert "valid-lifetime" in text


def test_diff_needs_two_versions_of_that_host(client_for, host):
    other = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12")
    mine, theirs = store(host, "a"), store(other, "b")
    client = client_for("admin")
    url = reverse("firewall:version_diff", args=[host.name])
    assert client.get(url).status_code == 404
    assert client.get(url, {"a": mine.pk, "b": theirs.pk}).status_code == 404


def test_version_history_is_bounded_but_keeps_the_running_version(host, settings):
    settings.PORTAL_RULESET_HISTORY = 3
    running = store(host, "v0")
    host.mark_applied(running)
    for n in range(1, 6):
        store(host, f"v{n}")
    kept = set(RuleSetVersion.objects.filter(host=host).values_list("nft_text", flat=True))
    assert kept == {"v0", "v3", "v4", "v5"}
    assert FirewallHost.objects.get(pk=host.pk).push_status == PushStatus.APPLIED


def test_same_content_is_stored_once(host):
    assert store(host, "same") == store(host, "same")
    assert RuleSetVersion.objects.filter(host=host).count() == 1


def test_push_now_and_rollback_are_for_admins_and_audited(
    client_for, host, settings, django_capture_on_commit_callbacks, firewall_redis_clean
):
    from apps.audit.models import AuditEntry
    from apps.firewall.pipeline import firewall_causes_take, push_request_report

    old, new = store(host, "old"), store(host, "new")
    host.mark_applied(new)
    for role in ("member", "volunteer", "support"):
        client = client_for(role)
        assert client.post(reverse("firewall:push_now")).status_code == 403
        url = reverse("firewall:rollback", args=[host.name])
        assert client.get(url, {"version": old.pk}).status_code == 403
        assert client.post(url, {"version": old.pk}).status_code == 403
    assert not AuditEntry.objects.exists()

    admin = client_for("admin")
    settings.PORTAL_FIREWALL_DEBOUNCE = 30  # no worker here; the task would wait anyway
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(reverse("firewall:push_now"))
    assert response.status_code == 302
    request_id = response.url.split("push=")[1]
    causes, requests = firewall_causes_take(host.site_id)
    assert any(c.startswith("push now (by ") for c in causes)
    assert requests == [request_id]
    outcome_url = reverse("firewall:push_outcome", args=[request_id])
    waiting = admin.get(outcome_url).content.decode()
    assert "running" in waiting
    assert 'hx-trigger="every 1s"' in waiting
    push_request_report(requests, site="main", outcome={"pushed": [], "unchanged": ["pl-nat1"]})
    done = admin.get(outcome_url).content.decode()
    assert "already up to date" in done
    assert "hx-trigger" not in done
    push_request_report(requests, site="main", outcome={"pushed": ["pl-nat1"], "unchanged": []})
    assert "pushed to pl-nat1" in admin.get(outcome_url).content.decode()

    # "Put #N back" asks first and names what changes; nothing happens on GET.
    url = reverse("firewall:rollback", args=[host.name])
    confirm = admin.get(url, {"version": old.pk}).content.decode()
    assert f"Put #{old.pk} back on pl-nat1?" in confirm
    assert f"The host runs #{new.pk} now." in confirm
    assert "until someone unpins it" in confirm
    assert FirewallHost.objects.get(pk=host.pk).pinned_version_id is None
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        page = admin.post(url, {"version": old.pk}, follow=True).content.decode()
    assert len(callbacks) == 1  # the rollback task is sent after the commit
    assert f"Version #{old.pk} is being put back on pl-nat1." in page
    assert f"Pinned to #{old.pk} by " in page
    pinned = FirewallHost.objects.get(pk=host.pk)
    assert pinned.pinned_version_id == old.pk
    assert pinned.pinned_at is not None
    with django_capture_on_commit_callbacks(execute=True):
        page = admin.post(reverse("firewall:unpin", args=[host.name]), follow=True)
    assert "is no longer pinned" in page.content.decode()
    assert FirewallHost.objects.get(pk=host.pk).pinned_version_id is None
    assert any(c.startswith("unpinned pl-nat1") for c in firewall_causes_take(host.site_id)[0])
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["firewall.push_now", "firewall.pin", "firewall.unpin"]
    other = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12")
    foreign = store(other, "theirs")
    assert admin.post(url, {"version": foreign.pk}).status_code == 404
    assert admin.get(url, {"version": "x"}).status_code == 404


def test_versions_show_their_elements_classes_and_compile_time(client_for, host):
    ruleset_version_store(
        host=host,
        nft_text="table inet portal_fw {}\n",
        tc_text="",
        content_hash="ab" * 32,
        counts={
            "portal_fw.fwd_tcp": 1200,
            "portal_fw.src_nat": 34,
            "portal_fw.rules": 31,
            "portal_fw.version": 1,
            "htb.classes": 42,
        },
        compile_seconds=0.1234,
        cause="counts",
    )
    page = client_for("support").get(reverse("firewall:host_detail", args=[host.name]))
    cells = [c.strip() for c in page.content.decode().split("<td>")]
    assert any(c.startswith("1,234<") for c in cells)  # elements: rules and marker not counted
    assert any(c.startswith("42<") for c in cells)
    assert any(c.startswith("123 ms<") for c in cells)


def test_push_now_without_any_enabled_firewall_says_so(client_for, firewall_redis_clean):
    admin = client_for("admin")
    response = admin.post(reverse("firewall:push_now"))
    request_id = response.url.split("push=")[1]
    page = admin.get(reverse("firewall:push_outcome", args=[request_id])).content.decode()
    assert "No firewall is enabled: there was nothing to push to." in page
    assert "hx-trigger" not in page


def test_a_sample_taken_before_the_confirmed_push_is_not_drift(client_for, host):
    """Issue 25: right after a push the newest health sample still names the version before it;
    the rollout itself confirmed the new one, so the list shows no red "Runs version X,
    expected Y" until a sample taken after the push disagrees."""
    from datetime import timedelta

    from django.utils import timezone

    old = store(host, "old")
    new = store(host, "new")
    host.mark_applied(new)
    HostHealthSample.objects.create(
        host=host,
        reachable=True,
        loaded_version=old.content_hash,
        at=host.applied_at - timedelta(seconds=2),  # asked just before the push confirmed
    )
    client = client_for("volunteer")
    page = client.get(reverse("firewall:host_list")).content.decode()
    assert "Runs version" not in page
    detail = client.get(reverse("firewall:host_detail", args=[host.name])).content.decode()
    assert "Runs version" not in detail
    HostHealthSample.objects.create(
        host=host, reachable=True, loaded_version=old.content_hash, at=timezone.now()
    )
    page = client.get(reverse("firewall:host_list")).content.decode()
    assert f"Runs version {old.content_hash[:12]}, expected {new.content_hash[:12]}" in page


def test_a_priority_failover_is_described_as_what_it_is(client_for, host):
    """Issue 25: `lab.sh failover` (the priority file at -254) puts an instance in FAULT with
    every link up; the host reports the operator's priority file, and the page says an operator
    moved the primary role (priority failover), in English and German. A FAULT without it is a
    tracked link down."""
    sample = HostHealthSample.objects.create(
        host=host,
        reachable=True,
        ha={
            "instances": {"ipv4": {"state": "FAULT"}, "ipv6": {"state": "FAULT"}},
            "operator_priority": {"ipv4": -254, "ipv6": -254},
        },
    )
    client = client_for("volunteer")
    page = client.get(reverse("firewall:host_list")).content.decode()
    assert "IPv4: an operator moved the primary role to the other host (priority failover)" in page
    assert "tracked link" not in page
    german = client.get(reverse("firewall:host_list"), HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "IPv4: Ein Operator hat die Primärrolle auf den anderen Host verlegt" in german
    sample.ha = {"instances": {"ipv4": {"state": "FAULT"}}}
    sample.save(update_fields=["ha"])
    page = client.get(reverse("firewall:host_list")).content.decode()
    assert "IPv4 failover instance in FAULT: a tracked link of this host is down" in page
    assert "operator" not in page.split("IPv4 failover instance", 1)[1][:200]


def test_only_the_confirmed_version_is_marked_running_the_equal_ones_say_same_as(client_for, host):
    """Issue 25: after a put-back several stored versions carry the running hash; only the one
    the host confirmed says "(running)", the others "same as #N"."""
    first = store(host, "a", cause="first")
    store(host, "b", cause="second")
    again = store(host, "a", cause="put back")  # the same content as #first
    host.mark_applied(again)
    page = client_for("admin").get(reverse("firewall:host_detail", args=[host.name]))
    html = page.content.decode()
    assert html.count("(running)") == 1
    running = html.split(f'data-testid="version-{again.pk}">', 1)[1].split("</td>", 1)[0]
    assert "(running)" in running
    same = html.split(f'data-testid="version-{first.pk}">', 1)[1].split("</td>", 1)[0]
    assert f"same as #{again.pk}" in same


def test_a_version_pushed_as_an_increment_says_when_it_can_be_compared_and_put_back(
    client_for, host, django_capture_on_commit_callbacks
):
    """Issue 26's delta path stores a version without its texts; the host's next full compile
    stores them if the host still runs it. Its pages say so instead of "0 bytes", a 404 or "its
    worker stopped"."""
    from apps.audit.models import AuditEntry

    full = store(host, "table inet portal_fw {}\n")
    delta = RuleSetVersion.objects.create(
        host=host,
        content_hash="d" * 64,
        nft_text="",
        texts_pending=True,
        size_bytes=0,
        counts=dict(full.counts),
        cause="device.add 7",
    )
    newer = store(host, "table inet portal_fw { }\n")
    host.mark_applied(newer)  # a later full compile runs; the increment's texts never came
    admin = client_for("admin")
    detail = admin.get(reverse("firewall:host_detail", args=[host.name])).content.decode()
    assert detail.count('data-testid="version-increment"') == 1
    assert "texts not stored: cannot be put back" in detail
    assert f"?version={delta.pk}" not in detail  # no "Put back" for it
    assert f"?version={full.pk}" in detail

    url = reverse("firewall:rollback", args=[host.name])
    confirm = admin.get(url, {"version": delta.pk})
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert f"Version #{delta.pk} was pushed as an increment and a later change replaced" in page
    assert 'name="version"' not in page  # no form to send
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        refused = admin.post(url, {"version": delta.pk}, follow=True)
    assert refused.status_code == 200
    assert "it cannot be put back." in refused.content.decode()
    assert not callbacks
    assert FirewallHost.objects.get(pk=host.pk).pinned_version_id is None
    assert not AuditEntry.objects.filter(action="firewall.pin").exists()

    diff = reverse("firewall:version_diff", args=[host.name])
    shown = admin.get(diff, {"a": full.pk, "b": delta.pk}).content.decode()
    assert f"#{delta.pk} was pushed as an increment" in shown
    assert "Until then it cannot be compared." in shown
    assert "diff-add" not in shown
    other = admin.get(diff, {"a": full.pk, "b": newer.pk}).content.decode()
    assert "pushed as an increment" not in other

    german = admin.get(
        reverse("firewall:host_detail", args=[host.name]), HTTP_ACCEPT_LANGUAGE="de"
    ).content.decode()
    assert ">Inkrement<" in german
    assert "Texte nicht gespeichert: nicht wieder einspielbar" in german
    # The version the host runs: stored by its next full compile, "Push now" says how.
    host.mark_applied(delta)
    running = admin.get(url, {"version": delta.pk}).content.decode()
    assert "the host runs it: its texts are stored by the next full compile" in running
