"""Requests an open resident page sends for its live-state badges: while a change is pending,
and once everything is live (idle). Real Chromium against a real server (DEBUG runserver).

Run by tests/bench/run.py in a subprocess with DATABASE_URL set to a scratch database; prints
one JSON object.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
WINDOW = 10.0  # seconds of counting per state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def confirm_everywhere(after) -> None:
    """Every host confirms a version newer than `after` and reads back a matching digest."""
    from apps.firewall.models import FirewallHost, PushLogEntry
    from apps.firewall.versions import ruleset_version_store

    for host in FirewallHost.objects.all():
        version = ruleset_version_store(
            host=host,
            nft_text=f"{host.name} {after}",
            tc_text="",
            content_hash=f"{int(after.timestamp() * 1000):064x}",
            counts={},
            compile_seconds=0,
            cause="bench",
            snapshot_at=after + timedelta(seconds=1),
        )
        host.mark_applied(version, digest={"total": "0" * 64, "parts": {}})
        PushLogEntry.objects.create(host=host, version=version, step="confirm", ok=True)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are plain
    # blocking calls between page waits.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django.setup()
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone
    from playwright.sync_api import sync_playwright

    from apps.firewall.models import FirewallHost
    from tests.factories import device_add, forward_add, member_active, opening_add

    for n, address in enumerate(("10.255.255.11", "10.255.255.12"), start=1):
        FirewallHost.objects.get_or_create(name=f"bench-nat{n}", defaults={"address": address})
    member = member_active()
    device = device_add(member, "laptop")
    for port in ("8080", "8081", "8082"):
        forward_add(member, device, ports=port)
    opening_add(device)
    user = member.user
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=dict(os.environ, PORTAL_FIREWALL_SYNC="0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    result: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/status/", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = browser.new_context()
            context.add_cookies(
                [
                    {
                        "name": settings.SESSION_COOKIE_NAME,
                        "value": session.session_key,
                        "url": f"http://127.0.0.1:{port}",
                    }
                ]
            )
            page = context.new_page()
            requests: list[float] = []
            page.on("request", lambda r: requests.append(time.monotonic()))
            # Pending: the rows changed after every confirmed version.
            page.goto(f"http://127.0.0.1:{port}/me/")
            badges = page.locator("[data-testid=live-state]").count()
            start = time.monotonic()
            page.wait_for_timeout(WINDOW * 1000)
            pending = [t for t in requests if t >= start]
            result["badges"] = badges
            result["pending_rps"] = len(pending) / WINDOW
            # Confirmed everywhere: how soon the page says so, then how quiet it is.
            confirm_everywhere(timezone.now())
            confirmed = time.monotonic()  # the hosts' confirms are committed now
            page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=live-state]')]"
                ".every(e => e.dataset.state === 'live')",
                timeout=10000,
                polling=50,
            )
            result["shown_live_after"] = time.monotonic() - confirmed
            start = time.monotonic()
            page.wait_for_timeout(WINDOW * 1000)
            result["idle_rps"] = len([t for t in requests if t >= start]) / WINDOW
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
