"""The whole chain with real parts: a real Prometheus scrapes the portal and evaluates the
shipped rules (every `for:` shortened to 1 s), a real Alertmanager with the shipped config
(only the URL and secret file replaced) calls the portal's webhook, and the portal opens the
incident for the site's buildings; when the hosts answer again the incident says so and waits
for a person."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from apps.alerts.models import AlertGroup
from apps.firewall.models import FirewallHost, Site
from apps.health.models import HostHealthSample
from apps.tickets.models import Incident
from tests.deploy.test_prometheus import PROM, free_port
from tests.factories import BuildingFactory

needs_alertmanager = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
    reason="prometheus and prometheus-alertmanager are installed by make test",
)
SECRET = "am-test-secret-3141592653"


def short_rules(target: Path) -> None:
    """The shipped rules with every `for:` at 1 s (as the lab runs them)."""
    text = (PROM / "portal.rules.yml").read_text()
    target.write_text(re.sub(r"for: \d+[smh]", "for: 1s", text))


def alertmanager_config(target: Path, *, url: str, secret_file: Path) -> None:
    config = yaml.safe_load((PROM / "alertmanager.yml").read_text())
    hook = config["receivers"][0]["webhook_configs"][0]
    hook["url"] = url
    hook["http_config"]["authorization"]["credentials_file"] = str(secret_file)
    config["route"].update(group_wait="500ms", group_interval="1s")
    target.write_text(yaml.safe_dump(config))


def get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
            return json.loads(response.read())
    except OSError:
        return {}


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout} s: {what}")


@needs_alertmanager
@pytest.mark.django_db(transaction=True)
def test_both_firewalls_down_reach_the_portal_as_an_incident_through_alertmanager(
    live_server, tmp_path, settings
):
    settings.PORTAL_ALERTS_WEBHOOK_SECRET = SECRET
    settings.PORTAL_ALERTS_HOLD_DOWN_SECONDS = 0
    site = Site.objects.create(name="north")
    site.buildings.set([BuildingFactory(code="N1", name="North 1")])
    hosts = [
        FirewallHost.objects.create(name=f"fw-n{n}", address=f"10.255.255.{30 + n}", site=site)
        for n in (1, 2)
    ]
    for host in hosts:
        HostHealthSample.objects.create(host=host, reachable=False)
    (tmp_path / "secret").write_text(SECRET)
    am_port, prom_port = free_port(), free_port()
    alertmanager_config(
        tmp_path / "alertmanager.yml",
        url=f"{live_server.url}/alerts/webhook",
        secret_file=tmp_path / "secret",
    )
    short_rules(tmp_path / "portal.rules.yml")
    target = live_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 500ms, evaluation_interval: 500ms}\n"
        "rule_files: [portal.rules.yml]\n"
        f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n"
        f"scrape_configs:\n  - job_name: portal\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    procs = [
        subprocess.Popen(
            ["prometheus-alertmanager", f"--config.file={tmp_path / 'alertmanager.yml'}",
             f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    try:
        incident = wait_for(
            lambda: Incident.objects.filter(ended_at__isnull=True).first(),
            60,
            "an incident opened by the alert",
        )
        assert list(incident.buildings.values_list("code", flat=True)) == ["N1"]
        assert incident.title == "The firewalls of North 1 do not answer"
        assert incident.created_by is None
        # One host down with the other healthy is a warning for the staff, nothing public (its
        # alert may reach the portal after the pair's, in another notification).
        wait_for(
            lambda: AlertGroup.objects.filter(scope="north", klass="backup_down").exists(),
            30,
            "the staff warning of a host down",
        )
        # The hosts answer again: the alert resolves, the incident says so and stays open.
        for host in hosts:
            HostHealthSample.objects.create(host=host, reachable=True)
        wait_for(
            lambda: incident.updates.filter(phase="monitoring").exists() or _settle_now(),
            60,
            "the monitoring update",
        )
        incident.refresh_from_db()
        assert incident.ended_at is None
        assert Incident.objects.count() == 1
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=15)


def _settle_now() -> bool:
    """What beat runs every minute (the hold-down is 0 here)."""
    from apps.alerts.services import alert_groups_settle

    alert_groups_settle()
    return False
