"""The host agent's flowtable probe on this machine's kernel, which has no flowtable support
(CONFIG_NF_FLOW_TABLE is not set): a bundle with the site's fast path is refused at the check
with what to do, nothing changes on the host, the rollout stops, and the Firewalls pages say
why (en + de). The accept case (Debian's kernel) is proved in tests/e2e/kernel_lab."""

from __future__ import annotations

import subprocess

import pytest
from django.urls import reverse
from lab_support import fw, run
from push_support import version
from test_push import helper_events, loaded

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, PushLogEntry
from apps.firewall.order import ruleset_rollout
from portal_fw import probes

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

REFUSAL = probes.REFUSALS[probes.FLOWTABLE]
GERMAN = (
    "der Kernel dieses Hosts kann keine Flowtables (CONFIG_NF_FLOW_TABLE): schalten Sie den "
    "Schnellpfad des Standorts ab"
)


def kernel_has_flowtables() -> bool:
    """The probe's own text, checked in pl-nat1 (the refuse case needs a kernel without)."""
    result = subprocess.run(
        ["ip", "netns", "exec", "pl-nat1", "nft", "-c", "-f", "-"],
        input=probes.flowtable_probe_text(None),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.returncode == 0


def test_a_fast_path_bundle_is_refused_on_a_kernel_without_flowtables(hosts, client_for):
    if kernel_has_flowtables():
        pytest.skip("this kernel has flowtables: the refuse case needs one without")
    good = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=good))
    before = run("ip", "netns", "exec", "pl-nat1", "nft", "-s", "list", "ruleset").stdout
    second_events = helper_events("pl-nat2")
    fast = [version(h, fast_path=True) for h in hosts]
    assert "flowtable fastpath" in fast[0].nft_text
    outcomes = ruleset_rollout(versions=fast)
    # Refused by the first host at the check: the second never gets it.
    assert len(outcomes) == 1
    assert outcomes[0].step == "check"
    # The agent's message, then its detail: what nft said to the probe.
    assert outcomes[0].message.startswith(f"the host refused the bundle: {REFUSAL}")
    assert "No such file or directory" in outcomes[0].message
    first, second = (FirewallHost.objects.get(pk=h.pk) for h in hosts)
    assert first.push_status == PushStatus.ERROR
    assert first.error_reason.startswith(f"check: the host refused the bundle: {REFUSAL}")
    assert second.push_status == PushStatus.PENDING
    assert not PushLogEntry.objects.filter(host=second, version__in=fast).exists()
    assert helper_events("pl-nat2") == second_events
    # Nothing applied: the same rule set, no confirm pending, the refusal in the host's log.
    assert loaded("pl-nat1") == good[0].content_hash
    assert fw("pl-nat1", "version").data["pending_confirm"] in (False, None)
    assert run("ip", "netns", "exec", "pl-nat1", "nft", "-s", "list", "ruleset").stdout == before
    assert helper_events("pl-nat1")[-1] == "bundle-refused-by-check"
    # The Firewalls pages say why, in the reader's language.
    staff = client_for("volunteer")
    for url in (reverse("firewall:host_list"), reverse("firewall:host_detail", args=["pl-nat1"])):
        english = staff.get(url).text
        assert REFUSAL.replace("'", "&#x27;") in english
        german = staff.get(url, HTTP_ACCEPT_LANGUAGE="de").text
        assert GERMAN in german
        assert "der Host hat das Bundle abgelehnt" in german
    # The same site without the fast path goes on as before.
    assert all(o.ok for o in ruleset_rollout(versions=[version(h, port=8081) for h in hosts]))
