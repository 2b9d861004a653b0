"""The production files are checked by the real tools: nginx -t and systemd-analyze verify."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_nginx_site_passes_nginx_t(tmp_path):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(nginx).exists(), "nginx is installed by `make test` (deploy/dev/packages.sh)"
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
    (tmp_path / "site.conf").write_text(
        site.replace("/etc/ssl/portal", str(tmp_path)).replace("/srv/portal", str(ROOT))
    )
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log off;\n  include {tmp_path}/site.conf;\n}}\n"
    )
    result = subprocess.run(
        [nginx, "-t", "-c", tmp_path / "nginx.conf", "-p", tmp_path],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_nginx_t_would_catch_a_broken_site(tmp_path):
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        "http {\n  server { listen 8080; proxy_pass_typo http://x; }\n}\n"
    )
    result = subprocess.run(
        ["nginx", "-t", "-c", tmp_path / "nginx.conf", "-p", tmp_path],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0


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
