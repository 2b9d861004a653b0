"""Metrics as an operator uses them: /metrics access, the alert rules (promtool), the Grafana
dashboard's queries, and a real Prometheus scraping a running portal and evaluating a rule."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
needs_prometheus = pytest.mark.skipif(
    not shutil.which("promtool"), reason="prometheus (promtool) is installed by make test"
)


def exported_names(client) -> set[str]:
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    return set(re.findall(r"^# TYPE (\w+) ", text, flags=re.M))


@pytest.mark.django_db
def test_metrics_answer_only_allowed_networks_or_the_token(client, settings):
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    text = response.content.decode()
    assert "# TYPE portal_firewall_host_reachable gauge" in text
    assert "portal_http_request_seconds_bucket" in text or "portal_http_request_seconds" in text
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.9").status_code == 403
    settings.PORTAL_METRICS_TOKEN = "s3cret-token"
    good = client.get("/metrics", REMOTE_ADDR="192.0.2.9", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert good.status_code == 200
    bad = client.get("/metrics", REMOTE_ADDR="192.0.2.9", HTTP_AUTHORIZATION="Bearer guess")
    assert bad.status_code == 403


@pytest.mark.django_db
def test_the_metrics_say_what_the_database_holds(client):
    from apps.firewall.models import FirewallHost
    from apps.health.models import HostHealthSample

    host = FirewallHost.objects.create(name="fw1", address="10.255.255.11", drift=["nft:x"])
    HostHealthSample.objects.create(
        host=host, reachable=True, conntrack_count=900, conntrack_max=1000,
        softirq_per_cpu=[0.1, 0.7],
        conntrack_stats={"drop": 3, "early_drop": 2, "found": 9, "offloaded": 41},
    )  # fmt: skip
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'portal_firewall_host_reachable{host="fw1",site="main"} 1.0' in text
    assert 'portal_firewall_host_drift_parts{host="fw1",site="main"} 1.0' in text
    assert 'portal_firewall_conntrack_entries{host="fw1"} 900.0' in text
    assert 'portal_firewall_softirq_share{cpu="1",host="fw1"} 0.7' in text
    assert 'portal_firewall_conntrack_drops{host="fw1"} 5.0' in text
    assert 'portal_firewall_offloaded_flows{host="fw1"} 41.0' in text


@pytest.mark.django_db
def test_dhcp_and_vrrp_fault_metrics_come_from_the_newest_sample(client):
    from apps.firewall.models import FirewallHost
    from apps.health.models import HostHealthSample

    kea = FirewallHost.objects.create(name="fw1", address="10.255.255.11", serves_dhcp=True)
    plain = FirewallHost.objects.create(name="fw2", address="10.255.255.12")
    ha = {"instances": {"ipv4": {"state": "FAULT"}, "ipv6": {"state": "BACKUP"}}}
    HostHealthSample.objects.create(
        host=kea, reachable=True, ha=ha,
        dhcp={"answering": False, "requests": 40, "answers": 12, "error": "no socket"},
    )  # fmt: skip
    # A host that is no DHCP server for the portal exports no DHCP state, whatever it runs.
    HostHealthSample.objects.create(host=plain, reachable=True, dhcp={"answering": True})
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'portal_firewall_dhcp_up{host="fw1",site="main"} 0.0' in text
    assert 'portal_firewall_dhcp_requests{host="fw1",site="main"} 40.0' in text
    assert 'portal_firewall_dhcp_answers{host="fw1",site="main"} 12.0' in text
    assert 'host="fw2"' not in "".join(
        line for line in text.splitlines() if line.startswith("portal_firewall_dhcp")
    )
    assert 'portal_firewall_vrrp_fault{family="ipv4",host="fw1",site="main"} 1.0' in text
    assert 'portal_firewall_vrrp_fault{family="ipv6",host="fw1",site="main"} 0.0' in text


@pytest.mark.django_db
def test_healthz_names_what_is_down(client):
    response = client.get("/healthz")
    body = response.json()
    assert body["database"] == "ok"
    assert body["redis"] == "ok"
    assert body["worker"] in ("never seen", "ok", "stale")
    assert response.status_code == (200 if body["worker"] == "ok" else 503)
    from apps.infra.heartbeat import HEARTBEAT_KEY, heartbeat_record
    from apps.infra.redis import redis_client

    heartbeat_record(worker="test@host")
    try:
        response = client.get("/healthz")
        assert response.status_code == 200, response.content
        assert response.json() == {"ok": True, "database": "ok", "redis": "ok", "worker": "ok"}
    finally:
        redis_client().delete(HEARTBEAT_KEY)


@needs_prometheus
def test_the_alert_rules_check_and_pass_their_unit_tests():
    checked = subprocess.run(
        ["promtool", "check", "rules", str(PROM / "portal.rules.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "portal.rules.test.yml"],
        cwd=PROM, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_rule_has_a_unit_test_that_makes_it_fire_and_one_that_does_not():
    import yaml

    rules = yaml.safe_load((PROM / "portal.rules.yml").read_text())
    tests = yaml.safe_load((PROM / "portal.rules.test.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    cases = [c for t in tests["tests"] for c in t.get("alert_rule_test", [])]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert len(alerts) >= 16
    assert sorted(alerts - fires) == [], "rules without a case in which they fire"
    assert sorted(alerts - quiet) == [], "rules without a case in which they stay quiet"


@pytest.mark.django_db
def test_every_rule_and_dashboard_panel_names_a_metric_the_portal_exports(client):
    exported = exported_names(client)
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}

    def names(expr: str) -> set[str]:
        return {re.sub(r"_(bucket|count|sum)$", "", n) for n in re.findall(r"portal_\w+", expr)}

    dashboard = json.loads((ROOT / "deploy/grafana/portal-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += re.findall(r"expr: (.+)", (PROM / "portal.rules.yml").read_text())
    assert exprs
    unknown = {n for e in exprs for n in names(e)} - base
    assert unknown == set(), f"not exported: {sorted(unknown)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_prometheus
@pytest.mark.django_db(transaction=True)
def test_a_real_prometheus_scrapes_the_portal_and_evaluates_a_rule(live_server, tmp_path):
    target = live_server.url.removeprefix("http://")
    shutil.copy(PROM / "portal.rules.yml", tmp_path / "portal.rules.yml")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [portal.rules.yml]\n"
        f"scrape_configs:\n  - job_name: portal\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def query(expr: str) -> list:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.loads(r.read())["data"]["result"]
        except OSError:
            return []

    try:
        deadline = time.monotonic() + 40
        up = beat = []
        while time.monotonic() < deadline:
            up = query('up{job="portal"}')
            beat = query('ALERTS{alertname="BeatDead"}')
            if up and up[0]["value"][1] == "1" and beat:
                break
            time.sleep(0.5)
        assert up, "Prometheus never scraped the portal"
        assert up[0]["value"][1] == "1"
        # The test portal has no beat: the rule sees it and the alert is pending (for: 1m).
        assert beat, query("ALERTS")
        assert beat[0]["metric"]["alertstate"] in ("pending", "firing")
    finally:
        proc.terminate()
        proc.wait(timeout=15)
