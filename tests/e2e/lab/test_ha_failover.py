"""The HA pair for real: keepalived and conntrackd from the portal's bundle, and established
connections that survive a host going down and coming back (issue: the HA pair).

The flows (tests/e2e/lab/flows.py) are real TCP and UDP connections between the lab's
namespaces: SNAT from a member's device to pl-inet, DNAT from pl-inet through a port forward,
IPv6 through an opening, and UDP. Each sends a line and waits for its echo every 100 ms."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from flows import Traffic, forget_flows
from lab_support import LAB_VAR, lab_sh, wait_for

from apps.firewall.models import FirewallHost, RuleSetVersion, Site
from apps.health.selectors import firewall_host_states
from apps.health.services import host_health_collect
from tests.factories import device_add, forward_add, member_active, opening_add

pytestmark = [pytest.mark.lab, pytest.mark.django_db(transaction=True)]

LAB_VIPS = (
    "member 10.100.0.1/16",
    "uplink 203.0.113.1/24",
    "member 2001:db8:100::1/48",
    "member fe80::1/64",
    "uplink 2001:db8:ffff::1/64",
)
INET4 = "203.0.113.10"


def make_pair(hosts: list[FirewallHost]) -> list[FirewallHost]:
    site = Site.objects.get(pk=Site.default_pk())
    site.virtual_addresses = "\n".join(LAB_VIPS)
    site.save()
    for n, host in enumerate(sorted(hosts, key=lambda h: h.name), 1):
        run_dir = LAB_VAR / host.name / "ha"
        host.sync_interface = "pl-sync"
        host.sync_address4 = f"10.255.254.{n}"
        host.sync_address6 = f"fdff:255:254::{n}"
        host.ha_run_dir = str(run_dir)
        host.ha_notify = "/run/portal-lab/portal-ha"
        host.conntrackd_config = str(run_dir / "conntrackd.conf")
        host.save()
    return hosts


@pytest.fixture
def pair(hosts):
    return make_pair(hosts)


def ha_status(host: str) -> dict:
    out = lab_sh("ha-status", host.removeprefix("pl-"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_portal_pushes_keepalived_and_conntrackd_and_the_hosts_check_them(pair):
    call_command("firewall_push", now=True)
    for host in FirewallHost.objects.order_by("name"):
        assert host.push_status == "applied", host.error_reason
        version = RuleSetVersion.objects.filter(host=host).latest("created_at")
        run_dir = Path(host.ha_run_dir)
        # What runs is what the portal compiled: the files on the host are the artefacts.
        assert (run_dir / "keepalived.conf").read_text() == version.files["keepalived"]
        assert (run_dir / "conntrackd.conf").read_text() == version.files["conntrackd"]
        assert "Mode FTFW" in version.files["conntrackd"]
    assert ha_status("nat1")["instances"]["ipv4"]["state"] == "MASTER"
    assert ha_status("nat2")["instances"]["ipv6"]["state"] == "MASTER"

    # A configuration keepalived refuses (a sync link this host does not have) is refused
    # by the host's check before anything changes: the running file stays.
    nat1 = FirewallHost.objects.get(name="pl-nat1")
    before = (Path(nat1.ha_run_dir) / "keepalived.conf").read_text()
    FirewallHost.objects.filter(pk=nat1.pk).update(sync_interface="nosuch0")
    with pytest.raises(CommandError, match="not every firewall"):
        call_command("firewall_push", now=True)
    nat1.refresh_from_db()
    assert nat1.push_status == "error"
    assert "keepalived" in nat1.error_reason
    assert (Path(nat1.ha_run_dir) / "keepalived.conf").read_text() == before
    assert ha_status("nat1")["instances"]["ipv4"]["state"] == "MASTER"


@pytest.fixture
def member_in_lab(pair):
    member = member_active()
    device = device_add(member, "server")
    forward_add(member, device, ports="8080")
    opening_add(device, ports="8443")
    added = lab_sh("device-add", device.ipv4, device.ipv6)
    assert added.returncode == 0, added.stderr
    call_command("firewall_push", now=True)
    assert all(h.push_status == "applied" for h in FirewallHost.objects.all())
    try:
        yield member, device
    finally:
        lab_sh("device-del", device.ipv4, device.ipv6)


def new_connection_during_gap(device) -> subprocess.Popen:
    """A connection opened while the takeover runs (started just before the links go down)."""
    code = (
        "import socket,time; time.sleep(0.1); t=time.monotonic();"
        f"s=socket.create_connection(('{INET4}', 9001), timeout=15, source_address=('{device.ipv4}', 0));"
        "s.sendall(b'hello\\n'); print(s.recv(100).decode().strip(), round(time.monotonic()-t, 3))"
    )
    return subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_thousand_connections_survive_host_down_and_failback_on_both_hosts(
    member_in_lab, tmp_path
):
    member, device = member_in_lab
    traffic = Traffic(member.public_ipv4.address, device.ipv4, device.ipv6, tmp_path)
    try:
        assert traffic.established == ["established 650 failed 0", "established 350 failed 0"]
        # The backup holds the primary's states before anything fails (conntrackd, FT-FW).
        wait_for(lambda: ha_status("nat2")["conntrackd"]["stats"]["external_active"] >= 800, 20)
        late = new_connection_during_gap(device)
        down = lab_sh("host-down", "nat1")
        assert down.returncode == 0, down.stderr
        took_over = down.stderr.strip()
        time.sleep(2)
        assert lab_sh("host-up", "nat1").returncode == 0
        assert lab_sh("failback").returncode == 0
        time.sleep(2)
        # The other direction: pl-nat2 (primary for IPv6) goes down, pl-nat1 takes both.
        assert lab_sh("host-down", "nat2").returncode == 0
        time.sleep(2)
        assert lab_sh("host-up", "nat2").returncode == 0
        assert lab_sh("failback").returncode == 0
        time.sleep(2)
        late_out, late_err = late.communicate(timeout=30)
        result = traffic.finish()
    finally:
        traffic.close()
        lab_sh("host-up", "nat1")
        lab_sh("host-up", "nat2")
        lab_sh("failback")
        forget_flows()
    gaps = sorted(g for flows in result.values() for g in flows["max_gap"])
    report = {
        label: {k: v for k, v in flows.items() if k not in ("max_gap", "silences")}
        | {"longest": max(flows["max_gap"])}
        for label, flows in result.items()
    }
    sys.stdout.write(f"\n{took_over}\nlongest silence per flow: p50 {gaps[len(gaps) // 2]} s, "
          f"p95 {gaps[int(len(gaps) * 0.95)]} s, max {gaps[-1]} s\n{json.dumps(report)}")  # fmt: skip
    assert late.returncode == 0, late_err
    assert late_out.startswith("hello"), late_out
    for label, flows in result.items():
        assert flows["opened"] == {"snat": 600, "dnat": 200, "ipv6": 150, "udp": 50}[label]
        assert flows["resets"] == 0, (label, flows["reset_kinds"])
        assert flows["silent"] == 0, (label, report[label])
    assert len(gaps) == 1000
    assert gaps[-1] < 5, report  # no flow stalled; docs/BENCHMARKS.md has the measured gaps


def test_split_brain_and_a_stopped_conntrackd_show_as_warnings(pair):
    call_command("firewall_push", now=True)
    hosts = list(FirewallHost.objects.order_by("name"))
    for host in hosts:
        host_health_collect(host=host)
    states = {s.host.name: s for s in firewall_host_states()}
    assert states["pl-nat1"].primary_for == ["IPv4"]
    assert states["pl-nat2"].primary_for == ["IPv6"]
    assert not [
        w for s in states.values() for w in s.warnings if w.code.startswith(("both", "no-"))
    ]

    assert lab_sh("sync-down").returncode == 0
    try:
        wait_for(lambda: ha_status("nat2")["instances"]["ipv4"]["state"] == "MASTER", 5)
        for host in hosts:
            host_health_collect(host=host)
        codes = {w.code for s in firewall_host_states() for w in s.warnings}
        assert "both-primary" in codes
    finally:
        assert lab_sh("sync-up").returncode == 0
    wait_for(lambda: ha_status("nat2")["instances"]["ipv4"]["state"] == "BACKUP", 10)

    # conntrackd stopped on the backup: the warning is there before anyone fails over.
    nat2 = hosts[1]
    conf = Path(nat2.conntrackd_config)
    subprocess.run(["conntrackd", "-C", str(conf), "-k"], check=True, capture_output=True)
    try:
        sample = host_health_collect(host=nat2)
        codes = {w.code for s in firewall_host_states() if s.host.pk == nat2.pk for w in s.warnings}
        assert "conntrackd-down" in codes, sample.ha
    finally:
        restart = lab_sh("ssh", "nat2", "health", "--sample-ms", "0")  # the helper still answers
        assert restart.returncode == 0
        subprocess.run(
            ["ip", "netns", "exec", "pl-nat2", "/run/portal-lab/portal-ha", "reload-conntrackd",
             str(conf), nat2.ha_run_dir],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
    assert ha_status("nat2")["conntrackd"]["running"] is True

    # Staff's "resync connection states": the backup's conntrackd asks its peer for everything
    # again (conntrackd -n over the host's forced command), audited.
    from apps.audit.models import AuditEntry
    from apps.firewall.services import host_state_resync

    log = Path(nat2.ha_run_dir) / "conntrackd.log"
    before = log.read_text().count("resync requested")
    state = host_state_resync(host=nat2, actor=None)
    assert state["conntrackd"]["running"] is True
    assert AuditEntry.objects.filter(action="firewall.state_resync").count() == 1
    assert wait_for(lambda: log.read_text().count("resync requested") > before, 5)


def test_the_backup_gets_a_bundle_first_and_its_refusal_never_reaches_the_primary(pair):
    call_command("firewall_push", now=True)
    assert lab_sh("failover", "nat2").returncode == 0  # pl-nat1 is primary for both families
    try:
        for host in FirewallHost.objects.all():
            host_health_collect(host=host)
        # The Firewalls page tells an operator's move from a link down (issue 25): the host
        # reports its priority files, and the FAULT it chose is called a priority failover.
        faults = [
            str(w.message)
            for s in firewall_host_states()
            if s.host.name == "pl-nat2"
            for w in s.warnings
            if w.code == "vrrp-fault"
        ]
        assert faults, "pl-nat2 gave up its roles: a warning says so"
        assert all("priority failover" in m and "link" not in m for m in faults), faults
        nat1 = FirewallHost.objects.get(name="pl-nat1")
        running = nat1.applied_checksum
        member_active()  # a change both hosts' bundles carry
        FirewallHost.objects.filter(name="pl-nat2").update(sync_interface="nosuch0")
        with pytest.raises(CommandError, match="not every firewall"):
            call_command("firewall_push", now=True)
        nat1.refresh_from_db()
        nat2 = FirewallHost.objects.get(name="pl-nat2")
        assert nat2.push_status == "error"
        assert "keepalived" in nat2.error_reason
        assert nat1.applied_checksum == running  # the primary was never touched
        assert nat1.push_status == "pending"
    finally:
        assert lab_sh("failback").returncode == 0


def test_with_conntrackd_down_on_the_backup_a_failover_loses_the_established_connections(
    member_in_lab, tmp_path
):
    """What is lost, documented: the backup holds no states, so every established TCP
    connection through the failed host stalls (its packets are invalid on the new primary and
    dropped: nf_conntrack_tcp_loose = 0); UDP flows start over as new entries and go on. The
    portal warned before the failover."""
    member, device = member_in_lab
    nat2 = FirewallHost.objects.get(name="pl-nat2")
    conf = Path(nat2.conntrackd_config)
    forget_flows()  # no entry of an earlier test's flows may carry one of these
    traffic = Traffic(
        member.public_ipv4.address, device.ipv4, device.ipv6, tmp_path, counts=(50, 0, 0, 10)
    )
    killed = subprocess.run(["conntrackd", "-C", str(conf), "-k"], capture_output=True)
    assert killed.returncode == 0, killed.stderr
    try:
        host_health_collect(host=nat2)
        codes = {w.code for s in firewall_host_states() if s.host.pk == nat2.pk for w in s.warnings}
        assert "conntrackd-down" in codes
        assert lab_sh("host-down", "nat1").returncode == 0
        time.sleep(3)
        result = traffic.finish()
    finally:
        traffic.close()
        lab_sh("host-up", "nat1")
        subprocess.run(
            ["ip", "netns", "exec", "pl-nat2", "/run/portal-lab/portal-ha", "reload-conntrackd",
             str(conf), nat2.ha_run_dir],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        lab_sh("failback")
    lost = {k: {x: v[x] for x in ("opened", "resets", "silent")} for k, v in result.items()}
    sys.stdout.write(f"\nconntrackd down on the backup, then failover: {json.dumps(lost)}\n")
    assert result["snat"]["opened"] == 50
    assert result["snat"]["silent"] == 50  # every established TCP connection is lost
    assert result["udp"]["silent"] == 0  # UDP goes on: new entries on the new primary
