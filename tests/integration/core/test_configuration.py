"""Bad configuration gets a clear message (run as a newcomer would: in a subprocess)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable


def run(args, env_extra=None, drop=(), timeout=60):
    skip = {*drop, "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(env_extra or {})
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": "x7$kq-production-like-secret-key-with-enough-entropy-9f8e7d6c5b4a",
    "ALLOWED_HOSTS": "portal.example.org",
    "DATABASE_URL": "postgresql://portal:pw@db.example.org:5432/portal",
    "REDIS_URL": "redis://redis.example.org:6379/0",
    "CELERY_BROKER_URL": "redis://redis.example.org:6379/0",
}


def test_check_deploy_reports_nothing_with_production_settings():
    result = run([PY, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_complains_about_development_settings():
    result = run([PY, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], {"DEBUG": "1"})
    assert result.returncode != 0
    assert "DEBUG" in result.stderr


def test_missing_secret_key_in_production_is_one_clear_line():
    env = dict(PRODUCTION)
    env.pop("SECRET_KEY")
    result = run([PY, "manage.py", "check"], env, drop=("SECRET_KEY",))
    assert result.returncode == 2
    assert result.stderr.strip() == "Configuration error: SECRET_KEY must be set when DEBUG is off."


def test_malformed_database_url_is_named():
    result = run([PY, "manage.py", "preflight"], {"DATABASE_URL": "not-a-url"})
    assert result.returncode == 2
    assert "DATABASE_URL is not a valid database URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_database_is_named_with_a_hint():
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    result = run(
        [PY, "manage.py", "preflight"],
        {"DATABASE_URL": "postgresql://portal:s3cret@127.0.0.1:1/portal"},
    )
    assert result.returncode == 1
    assert "Cannot connect to PostgreSQL at 127.0.0.1:1/portal" in result.stderr
    assert "Check DATABASE_URL" in result.stderr
    assert "s3cret" not in result.stderr


def test_unreachable_redis_is_named_with_a_hint(tmp_path):
    result = run([PY, "manage.py", "preflight"], {"REDIS_URL": f"unix://{tmp_path}/none.sock?db=0"})
    assert result.returncode == 1
    assert "Cannot connect to Redis" in result.stderr
    assert "Check REDIS_URL" in result.stderr


def test_non_boolean_debug_is_refused():
    result = run([PY, "manage.py", "check"], {"DEBUG": "maybe"})
    assert result.returncode == 2
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_make_run_refuses_a_port_already_taken():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run(["bash", "deploy/dev/run.sh"], {"PORT": str(port)})
    assert result.returncode == 1
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "make run PORT=" in result.stderr


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root for runuser (to become an unprivileged user)"
)
def test_missing_packages_without_root_print_the_apt_command():
    result = run(
        ["runuser", "-u", "nobody", "--", "bash", "deploy/dev/packages.sh"],
        {"PORTAL_EXTRA_PACKAGES": "portal-no-such-package"},
    )
    assert result.returncode == 1
    assert "Missing Debian packages: portal-no-such-package" in result.stderr
    assert "sudo apt-get update && sudo apt-get install -y portal-no-such-package" in result.stderr


def test_installed_packages_pass_quietly():
    result = run(["bash", "deploy/dev/packages.sh"])
    assert result.returncode == 0
    assert result.stdout == ""
