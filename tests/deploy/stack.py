"""The production stack on loopback for tests: the shipped nginx site in front of gunicorn as the
shipped unit starts it, both on free unprivileged ports under a scratch prefix, and an HTTP client
whose source address is chosen (127.0.0.2 and 127.0.0.3 are two different clients on loopback)."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, *, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen | None) -> None:
    """Stop a process started with start_new_session (its whole group: gunicorn's workers too)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def exec_start(unit: Path, replace: dict[str, str] | None = None) -> list[str]:
    """The ExecStart= command line of a unit file, as argv (after text replacements: ports)."""
    match = re.search(r"^ExecStart=(.+)$", unit.read_text(), flags=re.M)
    assert match, f"{unit} has no ExecStart"
    line = match.group(1).replace("%H", "test")  # systemd's host name specifier
    for old, new in (replace or {}).items():
        assert old in line, f"{old!r} is not in {unit.name}'s ExecStart"
        line = line.replace(old, new)
    return shlex.split(line)


def start_unit(
    unit: Path, *, env: dict[str, str], cwd: Path, log: Path, replace: dict[str, str] | None = None
) -> subprocess.Popen:
    """Run what the unit's ExecStart runs, in its own process group."""
    with log.open("ab") as out:
        return subprocess.Popen(
            exec_start(unit, replace), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def tls_pair(directory: Path) -> None:
    """A self-signed fullchain.pem / privkey.pem for the site's ssl_certificate lines."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", directory / "privkey.pem",
         "-out", directory / "fullchain.pem"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@dataclass
class Nginx:
    """The shipped site, templated onto loopback ports, run by Debian's nginx under `prefix`."""

    site: str  # the site file's text as deploy/ ships it (or as the install wrote it)
    prefix: Path
    upstream_port: int
    home: Path  # what /srv/portal becomes (the static files' alias)
    https_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    def config(self) -> str:
        site = self.site
        site = re.sub(r"^\s*listen \[::\]:\d+.*\n", "", site, flags=re.M)  # loopback IPv4 only
        site = re.sub(r"listen 443\b", f"listen 127.0.0.1:{self.https_port}", site)
        site = re.sub(r"listen 80\b", f"listen 127.0.0.1:{self.http_port}", site)
        site = site.replace("127.0.0.1:8000", f"127.0.0.1:{self.upstream_port}")
        # Whole paths only: an installed site already names a scratch .../srv/portal.
        site = re.sub(r"(?<!\S)/etc/ssl/portal", str(self.prefix), site)
        return re.sub(r"(?<!\S)/srv/portal", str(self.home), site)

    def start(self) -> Nginx:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        assert Path(nginx).exists(), "nginx is installed by `make test` (deploy/dev/packages.sh)"
        tls_pair(self.prefix)
        temp = self.prefix / "temp"
        temp.mkdir()
        temp.chmod(0o777)  # the workers (www-data when the master is root) buffer there
        (self.prefix / "site.conf").write_text(self.config())
        temps = "".join(
            f"  {kind}_temp_path {temp}/{kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (self.prefix / "nginx.conf").write_text(
            f"pid {self.prefix}/nginx.pid;\nerror_log {self.prefix}/error.log;\n"
            "daemon off;\nworker_processes 1;\nevents {}\n"
            f"http {{\n  include /etc/nginx/mime.types;\n{temps}"
            f"  access_log {self.prefix}/access.log;\n  include {self.prefix}/site.conf;\n}}\n"
        )
        log = self.prefix / "nginx.out"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [nginx, "-c", self.prefix / "nginx.conf", "-p", self.prefix],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_for_port(self.https_port, proc=self.proc, log=log)
        return self

    def stop(self) -> None:
        stop(self.proc)

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: str


class Browser:
    """A client on one loopback source address, with its own cookies (one browser of one user)."""

    def __init__(self, source: str, origin: str) -> None:
        self.source = source
        self.origin = origin
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, *, form: dict[str, str] | None = None, headers=None
    ) -> Response:
        url = urllib.parse.urlsplit(self.origin)
        if url.scheme == "https":
            context = ssl._create_unverified_context()  # noqa: S323  the test's self-signed cert
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                url.hostname, url.port, timeout=30, source_address=(self.source, 0), context=context
            )
        else:
            conn = http.client.HTTPConnection(
                url.hostname, url.port, timeout=30, source_address=(self.source, 0)
            )
        sent = {"Host": url.netloc, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
            sent.setdefault("Origin", self.origin)
            sent.setdefault("Referer", self.origin + path)
        try:
            conn.request(method, path, body=body, headers=sent)
            answer = conn.getresponse()
            text = answer.read().decode("utf-8", "replace")
        finally:
            conn.close()
        for header in answer.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return Response(answer.status, answer.headers, text)

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", path, **kw)

    def post_form(self, path: str, form: dict[str, str], **kw) -> Response:
        """POST a form the way a browser does: GET it first for the CSRF cookie and token."""
        page = self.get(path, headers=kw.get("headers"))
        assert page.status == 200, (page.status, page.body[:500])
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        assert token, page.body[:500]
        return self.request(
            "POST", path, form={"csrfmiddlewaretoken": token.group(1), **form}, **kw
        )
