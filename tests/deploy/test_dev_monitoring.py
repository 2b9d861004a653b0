"""`make run`'s monitoring (deploy/dev/monitoring.sh) started by honcho from the Procfile, as
run.sh starts it: the Alertmanager that runs calls the webhook of the portal's port, and the
Prometheus that runs scrapes that port. honcho gives every process of a Procfile a PORT of its
own (its base + 100 per line above); the monitoring once read that one, and Alertmanager posted
to 127.0.0.1:8511 for a portal on 8011."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HONCHO = Path(sys.executable).with_name("honcho")

pytestmark = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
    reason="prometheus and prometheus-alertmanager are installed by make test",
)


def free_base_port() -> int:
    """A port P whose monitoring ports P+1090 and P+1093 are free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 1093 >= 65536:
            continue
        taken = False
        for other in (port + 1090, port + 1093):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", other))
                except OSError:
                    taken = True
        if not taken:
            return port
    raise AssertionError("no free port with free monitoring ports")


def get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
            return json.loads(response.read())
    except (OSError, ValueError):
        return {}


def procfile_with_only_the_monitoring(target: Path) -> None:
    """deploy/dev/Procfile, every line kept in its place (honcho's PORT depends on it), every
    process but the monitoring replaced by a sleep."""
    lines = []
    for line in (ROOT / "deploy" / "dev" / "Procfile").read_text().splitlines():
        name, _, command = line.partition(":")
        lines.append(f"{name}: {command.strip() if name == 'monitoring' else 'sleep 120'}")
    assert any(line.startswith("monitoring:") for line in lines[1:]), lines
    target.write_text("\n".join(lines) + "\n")


def test_the_monitoring_of_make_run_calls_the_webhook_of_the_portals_port(tmp_path):
    port = free_base_port()
    procfile = tmp_path / "Procfile"
    procfile_with_only_the_monitoring(procfile)
    monitoring = tmp_path / "monitoring"
    monitoring.mkdir()
    (monitoring / "alerts-secret").write_text("dev-monitoring-secret\n")
    # What run.sh exports before it execs honcho.
    run_sh = (ROOT / "deploy" / "dev" / "run.sh").read_text()
    assert re.search(r"^export .*\bPORTAL_PORT\b", run_sh, re.MULTILINE), "run.sh"
    env = dict(
        os.environ,
        PORT=str(port),
        PORTAL_PORT=str(port),
        PORTAL_HOST="127.0.0.1",
        PORTAL_MONITORING_DIR=str(monitoring),
    )
    log = open(tmp_path / "honcho.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(HONCHO), "-f", str(procfile), "-d", str(ROOT), "start"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        am = f"http://127.0.0.1:{port + 1093}"
        prom = f"http://127.0.0.1:{port + 1090}"
        webhook = f"url: http://127.0.0.1:{port}/alerts/webhook"
        written = monitoring / "alertmanager.yml"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not written.exists():
            time.sleep(0.2)
        assert written.exists(), (tmp_path / "honcho.log").read_text()
        named = re.findall(r"url: (\S+)", written.read_text())
        assert named == [f"http://127.0.0.1:{port}/alerts/webhook"], (port, named)
        status = {}
        while time.monotonic() < deadline and not status:
            status = get_json(f"{am}/api/v2/status")
            time.sleep(0.3)
        assert status, (tmp_path / "honcho.log").read_text()
        assert webhook in status["config"]["original"]
        assert str(monitoring / "alerts-secret") in status["config"]["original"]
        config = {}
        while time.monotonic() < deadline + 15 and not config:
            config = get_json(f"{prom}/api/v1/status/config")
            time.sleep(0.3)
        assert config, (tmp_path / "honcho.log").read_text()
        assert f"127.0.0.1:{port}" in config["data"]["yaml"]
        assert f"127.0.0.1:{port + 1093}" in config["data"]["yaml"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()
