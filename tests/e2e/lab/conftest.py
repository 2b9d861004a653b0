"""Fixtures for the lab tests: the lab of deploy/lab/lab.sh, up for the session, always down after.

Run as root: ``.venv/bin/pytest -m lab tests/e2e/lab``.  Running them replaces a lab that is
already up (it is taken down first and at the end).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from lab_support import (
    LAB_VAR,
    MGMT,
    WORKER_ENV,
    lab_sh,
    make_run_pid,
    push,
    reset_host,
    ruleset,
    run,
)


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: needs root and network namespaces")


@pytest.fixture(scope="session")
def lab():
    """``lab.sh up`` for the whole session, and ``lab.sh down`` whatever happens."""
    # Never skip silently: `make test` runs as root and installs what the lab needs.
    if os.geteuid() != 0:
        pytest.fail("the lab needs root (network namespaces); run `make test` as root")
    if not shutil.which("ip") or not Path("/usr/sbin/sshd").exists():
        pytest.fail("the lab needs iproute2 and openssh-server (installed by `make test`)")
    running = make_run_pid()
    if running:
        pytest.fail(
            f"`make run` (pid {running}) uses the lab, and these tests would replace it: stop "
            "it first, or leave the lab tests out with PYTEST_ARGS=\"-m 'not lab'\""
        )
    lab_sh("down")
    try:
        started = time.monotonic()
        up = lab_sh("up")
        assert up.returncode == 0, f"lab.sh up failed:\n{up.stdout}\n{up.stderr}"
        info = json.loads((LAB_VAR / "lab.json").read_text())
        info["up_seconds"] = round(time.monotonic() - started, 2)
        yield info
    finally:
        down = lab_sh("down")
        assert down.returncode == 0, down.stderr
        lab_names = ("pl-nat1", "pl-nat2", "pl-dorm", "pl-inet", "pl-dev-", "pl-status")
        leftover = [  # only the lab's own: other suites (pl-c*) manage theirs
            line.split()[0]
            for line in run("ip", "netns", "list").stdout.splitlines()
            if line.split() and line.split()[0].startswith(lab_names)
        ]
        assert not leftover, f"namespaces left behind: {leftover}"


@pytest.fixture(autouse=True)
def ssh_connections_closed():
    """Each test starts without the SSH connections the one before left open in this process
    (apps.firewall.transport.POOL): hosts are reset and sshd restarted between tests."""
    yield
    from apps.firewall.transport import POOL

    POOL.close()


@pytest.fixture
def nat1(lab):
    """pl-nat1 holding a confirmed baseline rule set "base-1"."""
    reset_host("pl-nat1")
    push("pl-nat1", ruleset("base-1"), "base-1")
    return "pl-nat1"


@pytest.fixture
def hosts(lab):
    for name in MGMT:
        reset_host(name)
    from apps.firewall.models import FirewallHost

    rows = [
        FirewallHost.objects.create(name=name, address=address, rollout_order=order)
        for order, (name, address) in enumerate(sorted(MGMT.items()))
    ]
    yield rows
    lab_sh("sshd-start", "nat1")
    lab_sh("sshd-start", "nat2")
    for name in MGMT:  # leave the hosts as the other lab tests expect them
        reset_host(name)


@pytest.fixture
def sync_on(settings, firewall_redis_clean):
    """Network changes start real firewall runs (debounced briefly)."""
    settings.PORTAL_FIREWALL_SYNC = True
    settings.PORTAL_FIREWALL_DEBOUNCE = 0.2


@pytest.fixture
def worker(hosts, sync_on, tmp_path):
    """A real Celery worker on the test database, for as long as the test runs."""
    from tests.celery_proc import celery_start, celery_stop, wait_until

    proc = celery_start(
        "worker",
        "--pool",
        "solo",
        "-Q",
        "celery,firewall",
        "--purge",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "INFO",
        "--hostname",
        f"fw-{os.getpid()}@%h",
        log=tmp_path / "worker.log",
        env=WORKER_ENV,
    )
    try:
        ready = wait_until(lambda: "ready" in (tmp_path / "worker.log").read_text(), 30)
        assert ready, (tmp_path / "worker.log").read_text()
        yield proc
    finally:
        celery_stop(proc)


@pytest.fixture
def device_in_lab(hosts):
    """A checked-in member with one device whose addresses are on pl-dorm."""
    from tests.factories import device_add, member_active

    member = member_active()
    device = device_add(member, "laptop")
    added = lab_sh("device-add", device.ipv4, device.ipv6)
    assert added.returncode == 0, added.stderr
    try:
        yield member, device
    finally:
        lab_sh("device-del", device.ipv4, device.ipv6)
