"""deploy/README.md's production install, run as written: deploy/install.sh (the steps the README
lists) in a scratch prefix, then the installed units behind the real nginx with the installed site.

Nothing outside the prefix changes: PORTAL_SYSTEM=0 keeps the script away from apt, adduser,
systemctl and the machine's nginx; the database and the Redis database are the worktree's own
services (a scratch database, Redis database 9), removed afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import smtplib
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from tests.deploy.stack import (
    DEPLOY,
    ROOT,
    Browser,
    Nginx,
    free_port,
    start_unit,
    stop,
    wait_for_port,
)

EXAMPLE = DEPLOY / "portal.env.example"
SCRIPT = DEPLOY / "install.sh"
RUN = ROOT / "var" / "run"
REDIS_DB = 9
UNITS = ["portal-web", "portal-worker", "portal-firewall", "portal-beat", "portal-mail"]


def sourced(env_file: Path) -> dict[str, str]:
    """What `set -a; . file; set +a` exports in bash (the README's way to load the file)."""
    done = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; set -a; . "$1"; set +a; env -0', "bash", env_file],
        capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b"", done.stderr.decode()
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return {key: value for key, value in pairs if key not in {"PWD", "SHLVL", "_", "PATH"}}


def test_the_env_example_sources_cleanly_in_bash_and_reads_the_same_in_systemd():
    env = sourced(EXAMPLE)
    assert env["DEFAULT_FROM_EMAIL"] == "Network portal <portal@example.org>"
    assert env["DEBUG"] == "0"
    # systemd's EnvironmentFile= reads KEY=value and KEY="value" alike; anything bash would
    # expand or split differently (a $, a backquote, a backslash, an unquoted space) is refused.
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        assert re.fullmatch(r'[A-Z][A-Z0-9_]*=([^\s"\'$`\\<>|;&]*|"[^"$`\\]*")', line), (
            f"line {number} reads differently in bash and systemd: {line}"
        )


READ = re.compile(
    r"(?:(?:os\.environ\.get|os\.getenv|env_bool|env_int|env_list|env\.get)\(|os\.environ\[)\s*"
    r"[\"']([A-Z][A-Z0-9_]+)[\"']"
)


def settings_the_code_reads() -> set[str]:
    names: set[str] = set()
    for folder in ("portal", "apps", "workers"):
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" not in path.parts:
                names |= set(READ.findall(path.read_text()))
    # The units' wsgi/celery modules set the first; pytest-xdist sets the second for the tests'
    # settings (portal/settings_test.py): neither is an operator's setting.
    return names - {"DJANGO_SETTINGS_MODULE", "PYTEST_XDIST_WORKER"}


def test_the_env_example_lists_every_setting_the_code_reads():
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", EXAMPLE.read_text(), flags=re.M))
    read = settings_the_code_reads()
    assert {"PORTAL_FIREWALL_SSH_KEY", "PORTAL_MANAGEMENT_NETWORKS", "SECRET_KEY"} <= read
    assert read - listed == set(), "read by the code, missing from deploy/portal.env.example"
    assert listed - read == set(), "in deploy/portal.env.example, read by nothing"
    # The firewall's key and networks have no safe default outside the lab: set, not commented.
    env = sourced(EXAMPLE)
    for name in ("PORTAL_FIREWALL_SSH_KEY", "PORTAL_FIREWALL_KNOWN_HOSTS",
                 "PORTAL_MANAGEMENT_NETWORKS", "PORTAL_TRUSTED_PROXIES"):  # fmt: skip
        assert env.get(name), name


def test_the_readme_lists_the_install_steps_the_script_runs():
    script = SCRIPT.read_text()
    for variable, default in re.findall(r"^([A-Z_]+)=\$\{\1:-(/[^}]+)\}$", script, flags=re.M):
        script = script.replace(f"${variable}", default)
    script = script.replace("$ENV_FILE", "/etc/portal/portal.env")
    steps = re.findall(r'^step "(\d+)\. ([^"]+)"', script, flags=re.M)
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("## One host", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^(\d+)\. (.+)$", section, flags=re.M)
    assert len(steps) >= 10
    assert [(n, title.split(" (")[0]) for n, title in steps] == [
        (n, title.split(" (")[0].replace("`", "")) for n, title in listed
    ]
    assert "deploy/install.sh" in section


# --- The install itself ----------------------------------------------------------------------


@pytest.fixture
def database():
    """A fresh database on the worktree's PostgreSQL, dropped afterwards."""
    name = f"portal_install_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(f"host={RUN} dbname=postgres user=portal", autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://portal@{str(RUN).replace('/', '%2F')}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        redis.Redis(unix_socket_path=str(RUN / "redis.sock"), db=REDIS_DB).flushdb()


def checkout(home: Path) -> None:
    """What `git clone` gives: the tracked files (and new ones not ignored) of this worktree."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, home / name)


def install(env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", str(Path(env["PORTAL_HOME"]) / "deploy/install.sh")],
        env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def edit(env_file: Path, values: dict[str, str]) -> None:
    """What the operator does: set each value (uncommenting it where it is commented)."""
    text = env_file.read_text()
    for key, value in values.items():
        text, n = re.subn(rf"^#? ?{key}=.*$", f"{key}={value}", text, count=1, flags=re.M)
        assert n == 1, key
    env_file.write_text(text)


@pytest.mark.timeout(600)  # pip's downloads; the rest takes about a minute
def test_the_production_install_runs_as_written(scratch, database):
    home, etc = scratch / "srv/portal", scratch / "etc/portal"
    checkout(home)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", "/root"),  # pip's cache
        "PORTAL_HOME": str(home),
        "PORTAL_ETC": str(etc),
        "SYSTEMD_DIR": str(scratch / "etc/systemd/system"),
        "NGINX_SITE": str(scratch / "etc/nginx/sites-enabled/portal.conf"),
        "PORTAL_SYSTEM": "0",
    }
    first = install(env)
    assert "Now edit" in first  # stops for the operator: the example's SECRET_KEY is no key
    assert (home / "var").stat().st_mode & 0o777 == 0o750
    assert etc.stat().st_mode & 0o777 == 0o750
    env_file = etc / "portal.env"
    assert env_file.stat().st_mode & 0o777 == 0o640
    assert (home / "locale/de/LC_MESSAGES/django.mo").exists()  # compilemessages ran
    manifest = json.loads((home / "staticfiles/staticfiles.json").read_text())["paths"]

    # Only production dependencies: no test tool (nor make run's honcho) in the venv.
    listed = subprocess.run(
        [home / ".venv/bin/python", "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dev_names = {re.split(r"[=<>\[ ]", d)[0].lower().replace("_", "-") for d in dev["dev"]}
    assert installed & dev_names == set()
    assert {"django", "gunicorn", "celery"} <= installed

    web_port, smtp_port = free_port(), free_port()
    nginx = Nginx(site=Path(env["NGINX_SITE"]).read_text(), prefix=scratch / "nginx",
                  upstream_port=web_port, home=home)  # fmt: skip
    nginx.prefix.mkdir()
    nginx.prefix.chmod(0o755)
    edit(env_file, {
        "SECRET_KEY": "install-test-" + uuid.uuid4().hex * 2,
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": nginx.origin,
        "PORTAL_URL": nginx.origin,
        "DATABASE_URL": database,
        "REDIS_URL": f"unix://{RUN}/redis.sock?db={REDIS_DB}",
        "CELERY_BROKER_URL": f"redis+socket://{RUN}/redis.sock?virtual_host={REDIS_DB}",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "PORTAL_SMTP_PORT": str(smtp_port),
        "PORTAL_HEARTBEAT_INTERVAL": "2",
        "LOG_FORMAT": "console",
    })  # fmt: skip
    second = install(env)
    sys.stdout.write(first + second)  # shown when the test fails: each step's start time
    assert "== 10. Database" in second
    assert "The portal is installed." in second

    units = Path(env["SYSTEMD_DIR"])
    assert sorted(p.stem for p in units.glob("*.service")) == sorted(UNITS)
    for unit in units.glob("*.service"):
        text = unit.read_text()
        assert f"EnvironmentFile={env_file}" in text
        assert f"ReadWritePaths={home}/var" in text
        rest = text.replace(str(home), "").replace(str(etc), "")
        assert "/srv/portal" not in rest, unit.name
        assert "/etc/portal" not in rest, unit.name

    # Run what the units run, with what systemd's EnvironmentFile= gives them.
    unit_env = {"PATH": "/usr/bin:/bin", **sourced(env_file)}
    logs = scratch / "logs"
    logs.mkdir()
    procs = []
    try:
        for name, replace in [
            ("portal-web", {"127.0.0.1:8000": f"127.0.0.1:{web_port}", "--workers 4": "--workers 2"}),
            ("portal-worker", {"--concurrency 4": "--concurrency 1"}),
            ("portal-beat", {}),
            ("portal-mail", {}),
        ]:  # fmt: skip
            procs.append(start_unit(units / f"{name}.service", env=unit_env, cwd=home,
                                    log=logs / f"{name}.log", replace=replace))  # fmt: skip
        wait_for_port(web_port, proc=procs[0], log=logs / "portal-web.log")
        wait_for_port(smtp_port, proc=procs[3], log=logs / "portal-mail.log")
        nginx.start()
        browser = Browser("127.0.0.2", nginx.origin)

        german = browser.get("/accounts/login/", headers={"Accept-Language": "de"})
        assert german.status == 200, german.body[:500]
        assert "Neu im Wohnheim?" in german.body  # the project's own catalogue, compiled
        english = Browser("127.0.0.3", nginx.origin).get("/accounts/login/")
        assert "New in the dormitory?" in english.body

        css = next(hashed for name, hashed in manifest.items() if name.endswith(".css"))
        static = browser.get(f"/static/{css}")
        assert static.status == 200
        # nginx's one header (not whitenoise's, not two: the site had `expires` beside it)
        assert static.headers.get_all("Cache-Control") == ["public, max-age=31536000, immutable"]
        assert static.body == (home / "staticfiles" / css).read_text()

        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as smtp:
            assert smtp.ehlo()[0] == 250  # the mail listener's unit listens

        deadline = time.monotonic() + 60
        while True:  # the worker's heartbeat (beat sends it every 2 s here)
            health = browser.get("/healthz")
            if health.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert health.status == 200, health.body
        assert json.loads(health.body) == {"ok": True, "database": "ok", "redis": "ok",
                                           "worker": "ok"}  # fmt: skip
    finally:
        nginx.stop()
        for proc in procs:
            stop(proc)
