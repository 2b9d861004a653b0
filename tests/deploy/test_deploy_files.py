"""The production files are checked by the real tools: nginx -t and systemd-analyze verify."""

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# /usr/sbin is not on an ordinary user's PATH; nginx -t runs without root when every path it
# writes (pid, logs, request-body and proxy temp files) is under the test's own directory.
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_t(tmp_path: Path, http: str) -> subprocess.CompletedProcess[str]:
    """`nginx -t` on a main config around `http` (the inside of the http block)."""
    temp = "".join(
        f"  {kind}_temp_path {tmp_path}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log off;\n{temp}{http}\n}}\n"
    )
    assert Path(NGINX).exists(), "nginx is installed by `make test` (deploy/dev/packages.sh)"
    return subprocess.run(
        [NGINX, "-t", "-c", tmp_path / "nginx.conf", "-p", tmp_path],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_nginx_site_passes_nginx_t(tmp_path):
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=portal.example.org",
            "-keyout",
            tmp_path / "privkey.pem",
            "-out",
            tmp_path / "fullchain.pem",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    site = (ROOT / "deploy/nginx/portal.conf").read_text()
    if os.geteuid() != 0:  # nginx -t binds the ports: an ordinary user may not bind 80 and 443
        site = re.sub(
            r"listen (\[::\]:)?(80|443)\b", lambda m: f"listen {m[1] or ''}{free_port()}", site
        )
    (tmp_path / "site.conf").write_text(
        site.replace("/etc/ssl/portal", str(tmp_path)).replace("/srv/portal", str(ROOT))
    )
    result = nginx_t(tmp_path, f"  include {tmp_path}/site.conf;")
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_nginx_t_would_catch_a_broken_site(tmp_path):
    result = nginx_t(tmp_path, "  server { listen 8080; proxy_pass_typo http://x; }")
    assert result.returncode != 0
    assert 'unknown directive "proxy_pass_typo"' in result.stderr  # refused for the typo


UNITS = sorted((ROOT / "deploy/systemd").glob("*.service"))


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_units_verify_cleanly(unit, tmp_path):
    # Point the unit at this checkout (its .venv exists after `make test`'s set-up).
    env_file = tmp_path / "portal.env"
    env_file.write_text("DEBUG=0\n")
    text = (
        unit.read_text()
        .replace("/srv/portal", str(ROOT))
        .replace("/etc/portal/portal.env", str(env_file))
        .replace("User=portal", "User=root")
        .replace("Group=portal", "Group=root")
    )
    target = tmp_path / unit.name
    target.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", target], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_the_units_exist():
    assert {u.name for u in UNITS} == {
        "portal-web.service",
        "portal-worker.service",
        "portal-firewall.service",
        "portal-beat.service",
        "portal-mail.service",
    }
