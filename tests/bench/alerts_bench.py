"""Alerts in, incidents out, measured with real parts:

1. Webhook throughput: gunicorn as portal-web.service starts it (DEBUG=0, its 4 workers), 1,000
   distinct alerts (20 sites x 5 classes x 10 instances) in bodies of 25 from 4 parallel
   callers. The first burst opens 20 incidents (one per site; the other 4 classes join it);
   3 more bursts of new alerts for the groups already firing show the steady rate.
2. Alert fires -> incident on the off-site status page: a real Prometheus scrapes the portal and
   evaluates the shipped rules with every `for:` shortened to 5 s, a real Alertmanager (the
   shipped config, group_wait 1 s) calls the webhook, a Celery worker publishes the page to a
   directory. Two clocks stop at the published English page naming the incident: one started
   when the health samples that make both firewalls of a site unreachable are stored, the other
   when Prometheus marks FirewallPairUnreachable firing (polled every 0.1 s: "alert fires").
   Shipped instead: `for:` 1 m (adds 55 s to the first clock only), scrape and evaluation every
   30 s (adds up to 58 s to the first clock), group_wait 10 s (adds 9 s to both).

Run by tests/bench/run.py in a scratch database; prints one JSON list of rows last.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.deploy.stack import DEPLOY, free_port, start_unit, stop, wait_for_port  # noqa: E402

SECRET = "bench-alerts-secret-0123456789"
SITES, CLASSES, INSTANCES = 20, 5, 10
NAMES = ["FirewallPairUnreachable", "ConntrackTableFull", "SoftirqSaturated", "FailoverNoPrimary",
         "FirewallPushRolledBack"]  # fmt: skip
SHORT_FOR = 5


def _alerts(run: int) -> list[dict]:
    start = f"2026-11-28T{run:02d}:00:00Z"
    alerts = []
    for site in range(SITES):
        for name in NAMES:
            for i in range(INSTANCES):
                labels = {"alertname": name, "site": f"b{site}", "instance": f"{run}-{i}"}
                alerts.append({
                    "status": "firing", "labels": labels, "annotations": {},
                    "startsAt": start, "endsAt": "0001-01-01T00:00:00Z",
                    "fingerprint": f"{run:02x}{site:02x}{NAMES.index(name):02x}{i:04x}",
                })  # fmt: skip
    return alerts


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(  # noqa: S310 (loopback)
        url, data=body,
        headers={"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
        return response.status


def throughput(url: str) -> list[float]:
    rates = []
    for run in range(1, 5):
        alerts = _alerts(run)
        bodies = [
            json.dumps({"version": "4", "status": "firing", "alerts": alerts[i : i + 25]}).encode()
            for i in range(0, len(alerts), 25)
        ]
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            statuses = list(pool.map(lambda b: _post(url, b), bodies))
        elapsed = time.perf_counter() - began
        assert statuses == [200] * len(bodies), statuses
        rates.append(len(alerts) / elapsed)
    return rates


def _env(run: Path, port: int) -> dict[str, str]:
    return dict(
        os.environ,
        DEBUG="0",
        SECRET_KEY="bench-" + "k" * 50,
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="0",
        LOG_LEVEL="WARNING",
        PORTAL_ALERTS_WEBHOOK_SECRET=SECRET,
        PORTAL_STATUS_PUBLISH_TARGET=str(run / "offsite"),
        STATIC_ROOT=str(run / "static"),  # collected as in production (hashed names)
    )


def _firing_since(prometheus: str, began: float, found: list[float]) -> None:
    """Poll Prometheus until FirewallPairUnreachable fires; note when (monotonic)."""
    url = f"{prometheus}/api/v1/alerts"
    while time.monotonic() - began < 180 and not found:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
                alerts = json.loads(response.read())["data"]["alerts"]
        except OSError:
            alerts = []
        if any(
            a["labels"]["alertname"] == "FirewallPairUnreachable" and a["state"] == "firing"
            for a in alerts
        ):
            found.append(time.monotonic())
            return
        time.sleep(0.1)


def to_offsite(tmp: Path, portal: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from both hosts unreachable (samples stored), and from the alert firing in
    Prometheus, to the incident on the published page."""
    import threading

    from apps.firewall.models import FirewallHost, Site
    from apps.health.models import HostHealthSample
    from apps.members.models import Building

    site = Site.objects.create(name="chain")
    site.buildings.set([Building.objects.create(code="CH", name="Chain House")])
    hosts = [
        FirewallHost.objects.create(name=f"fw-c{n}", address=f"10.255.253.{n}", site=site)
        for n in (1, 2)
    ]
    for host in hosts:
        HostHealthSample.objects.create(host=host, reachable=True)
    am_port, prom_port = free_port(), free_port()
    rules = (ROOT / "deploy/prometheus/portal.rules.yml").read_text()
    (tmp / "portal.rules.yml").write_text(re.sub(r"for: \d+[smh]", f"for: {SHORT_FOR}s", rules))
    (tmp / "secret").write_text(SECRET)
    am = (ROOT / "deploy/prometheus/alertmanager.yml").read_text()
    am = am.replace("https://portal.example.org", portal).replace(
        "/etc/prometheus/portal-alerts-secret", str(tmp / "secret")
    )
    am = am.replace("group_wait: 10s", "group_wait: 1s")
    (tmp / "alertmanager.yml").write_text(am)
    target = portal.removeprefix("http://")
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [portal.rules.yml]\n"
        f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n"
        f"scrape_configs:\n  - job_name: portal\n    static_configs: [{{targets: ['{target}']}}]\n"
    )  # fmt: skip
    celery = str(Path(sys.executable).with_name("celery"))
    procs = [
        subprocess.Popen(
            [celery, "-A", "portal", "worker", "-Q", "celery", "--pool", "solo", "-l", "WARNING"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, start_new_session=True,
        ),
        subprocess.Popen(
            ["prometheus-alertmanager", f"--config.file={tmp / 'alertmanager.yml'}",
             f"--storage.path={tmp / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ),
        subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ),
    ]  # fmt: skip
    page = Path(env["PORTAL_STATUS_PUBLISH_TARGET"]) / "index.html"
    try:
        time.sleep(8)  # Prometheus has scraped the healthy pair; the worker is connected
        began = time.monotonic()
        for host in hosts:
            HostHealthSample.objects.create(host=host, reachable=False)
        fired: list[float] = []
        watcher = threading.Thread(
            target=_firing_since, args=(f"http://127.0.0.1:{prom_port}", began, fired)
        )
        watcher.start()
        while time.monotonic() - began < 180:
            if page.exists() and "The firewalls of Chain House do not answer" in page.read_text():
                shown = time.monotonic()
                watcher.join(timeout=5)
                assert fired, "the page showed the incident before Prometheus said it fired"
                return shown - began, shown - fired[0]
            time.sleep(0.2)
        raise AssertionError("the incident never reached the off-site page")
    finally:
        for proc in procs:
            stop(proc)


def main() -> None:
    import django

    django.setup()
    from django.core.cache import cache
    from django.core.management import call_command

    from apps.firewall.models import Site
    from apps.infra.celery import app as celery_app

    load_start = os.getloadavg()[0]
    call_command("flush", "--no-input", verbosity=0)
    cache.clear()
    celery_app.control.purge()
    for n in range(SITES):
        Site.objects.create(name=f"b{n}")
    tmp = Path(tempfile.mkdtemp(prefix="alerts-bench-"))
    (tmp / "chain").mkdir()
    port = free_port()
    env = _env(tmp, port)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    log = ROOT / "var/alerts-bench.log"
    web = start_unit(DEPLOY / "systemd/portal-web.service", env=env, cwd=ROOT, log=log,
                     replace={"/srv/portal": str(ROOT), "127.0.0.1:8000": f"127.0.0.1:{port}",
                              "--access-logfile -": ""})  # fmt: skip
    try:
        wait_for_port(port, proc=web, log=log)
        rates = throughput(f"http://127.0.0.1:{port}/alerts/webhook")
        chain = (
            [to_offsite(tmp / "chain", f"http://127.0.0.1:{port}", env)]
            if (shutil.which("prometheus") and shutil.which("prometheus-alertmanager"))
            else []
        )
    finally:
        stop(web)
        shutil.rmtree(tmp, ignore_errors=True)
    steady = rates[1:]
    rows = [
        ("machine: load average (1 min) at start", f"{load_start:.2f}", "", ""),
        ("webhook: first burst of 1,000 alerts (bodies of 25, 4 callers; opens 20 incidents)",
         f"{rates[0]:.0f}", "alerts/s", ""),
        (f"webhook: 1,000 new alerts of firing groups [median of 3; best {max(steady):.0f}, "
         f"worst {min(steady):.0f}]", f"{statistics.median(steady):.0f}", "alerts/s", ""),
    ]  # fmt: skip
    if chain:
        from_samples, from_firing = chain[0]
        rows.append((
            "alert fires (Prometheus marks FirewallPairUnreachable firing) -> incident on the "
            "off-site page (Alertmanager group_wait 1 s; shipped 10 s adds 9 s)",
            f"{from_firing:.1f}", "s", "< 60 s",
        ))  # fmt: skip
        rows.append((
            "both firewalls' unreachable health samples stored -> incident on the off-site page "
            f"(rules' for: {SHORT_FOR} s, scrape and evaluation 1 s, group_wait 1 s; shipped "
            "for: 1m, 30 s, 10s add 55 s + up to 58 s + 9 s)",
            f"{from_samples:.1f}", "s", "",
        ))  # fmt: skip
    rows.append(("machine: load average (1 min) at end", f"{os.getloadavg()[0]:.2f}", "", ""))
    print(json.dumps(rows))  # noqa: T201


if __name__ == "__main__":
    main()
