"""The off-site status page: a change publishes the page (en + de) through the Celery task, the
shipped nginx site serves it from another place, and it says when it was last updated."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from apps.tickets import publish
from apps.tickets.publish import QUEUED_KEY, PublishError
from apps.tickets.services import incident_declare, incident_update_post
from tests.deploy.stack import free_port, stop, wait_for_port
from tests.factories import BuildingFactory
from tests.integration.tickets.conftest import eager_tasks

ROOT = Path(__file__).resolve().parents[2]


def offsite_nginx(prefix: Path, root: Path) -> tuple[subprocess.Popen, int]:
    """deploy/nginx/status-offsite.conf on a loopback port, serving `root`."""
    port = free_port()
    site = (ROOT / "deploy/nginx/status-offsite.conf").read_text()
    site = re.sub(r"^\s*listen \[::\]:\d+;\n", "", site, flags=re.M)
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};").replace("/srv/status", str(root))
    temp = prefix / "temp"
    temp.mkdir()
    temp.chmod(0o777)
    temps = "".join(
        f"  {k}_temp_path {temp}/{k};\n"
        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (prefix / "nginx.conf").write_text(
        f"pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\ndaemon off;\nworker_processes 1;\n"
        f"events {{}}\nhttp {{\n  include /etc/nginx/mime.types;\n{temps}"
        f"  access_log {prefix}/access.log;\n{site}}}\n"
    )  # fmt: skip
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    log = prefix / "nginx.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [nginx, "-c", prefix / "nginx.conf", "-p", prefix],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    wait_for_port(port, proc=proc, log=log)
    return proc, port


def fetch(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


@pytest.mark.django_db
def test_a_change_publishes_the_page_which_another_web_server_serves(
    scratch, settings, django_capture_on_commit_callbacks
):
    root = scratch / "status"
    root.mkdir()
    settings.PORTAL_STATUS_PUBLISH_TARGET = str(root)
    proc, port = offsite_nginx(scratch, root)
    try:
        with eager_tasks(), django_capture_on_commit_callbacks(execute=True):
            incident = incident_declare(
                actor=None, title="Firewalls of North do not answer",
                title_de="Die Firewalls von North antworten nicht",
                buildings=[BuildingFactory(code="N1", name="North 1")],
            )  # fmt: skip
        english, german = fetch(port, "/"), fetch(port, "/de/")
        assert "Firewalls of North do not answer" in english
        assert "Die Firewalls von North antworten nicht" in german
        assert "As of" in english
        assert "this page refreshes every minute" in english
        assert 'data-testid="offsite-note"' in german
        assert "pico" in fetch(port, re.search(r'href="(/static/vendor/[^"]+)"', english)[1])
        # The next change publishes again: the update shows.
        with eager_tasks(), django_capture_on_commit_callbacks(execute=True):
            incident_update_post(incident=incident, actor=None, body="Cause found: power.")
        assert "Cause found: power." in fetch(port, "/")
    finally:
        stop(proc)


@pytest.mark.django_db
def test_a_burst_of_changes_queues_one_publish(settings, monkeypatch):
    from apps.infra.redis import redis_client

    settings.PORTAL_STATUS_PUBLISH_TARGET = "/nonexistent-target"
    sent = []
    monkeypatch.setattr(publish.dispatch, "status_publish", lambda: sent.append(1))
    redis_client().delete(QUEUED_KEY)
    try:
        for _ in range(50):
            publish.status_publish_soon()
        assert sent == [1]
    finally:
        redis_client().delete(QUEUED_KEY)


@pytest.mark.django_db
@pytest.mark.parametrize("target", ["host:/srv", "a@b:/x;rm -rf /", "../x", "root@h:relative"])
def test_a_target_that_is_neither_a_directory_nor_user_at_host_path_is_refused(settings, target):
    settings.PORTAL_STATUS_PUBLISH_TARGET = target
    with pytest.raises(PublishError, match="neither a directory nor"):
        publish.status_publish()


@pytest.mark.django_db
def test_an_unreachable_ssh_target_fails_for_the_task_to_retry(settings):
    settings.PORTAL_STATUS_PUBLISH_TARGET = "status@127.0.0.1:/srv/status"
    settings.PORTAL_STATUS_PUBLISH_SSH_PORT = free_port()  # nothing listens there
    with pytest.raises(PublishError):
        publish.status_publish()


@pytest.mark.django_db
def test_the_page_reaches_a_second_host_over_ssh(scratch, settings):
    """A real sshd on loopback (its own host key and authorised key) stands in for the second
    web host; rsync over SSH with the pinned host key puts both languages there."""
    import getpass
    import os

    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    keys = scratch / "keys"
    keys.mkdir()
    for name in ("host", "portal"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", keys / name], check=True
        )
    (keys / "authorized_keys").write_text((keys / "portal.pub").read_text())
    os.chmod(keys / "authorized_keys", 0o600)
    port = free_port()
    (keys / "known_hosts").write_text(
        f"[127.0.0.1]:{port} " + " ".join((keys / "host.pub").read_text().split()[:2]) + "\n"
    )
    config = keys / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nPidFile {keys / 'sshd.pid'}\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory (root's sshd)
    log = scratch / "sshd.log"
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", config], stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    root = scratch / "status"
    try:
        wait_for_port(port, proc=proc, log=log)
        settings.PORTAL_STATUS_PUBLISH_TARGET = f"{getpass.getuser()}@127.0.0.1:{root}"
        settings.PORTAL_STATUS_PUBLISH_SSH_PORT = port
        settings.PORTAL_STATUS_PUBLISH_SSH_KEY = str(keys / "portal")
        settings.PORTAL_STATUS_PUBLISH_KNOWN_HOSTS = str(keys / "known_hosts")
        incident_declare(actor=None, title="Uplink down", title_de="Uplink ausgefallen")
        publish.status_publish()
        assert "Uplink down" in (root / "index.html").read_text()
        assert "Uplink ausgefallen" in (root / "de/index.html").read_text()
        # Another host key at that address: refused (no prompt, nothing copied).
        (keys / "known_hosts").write_text(
            f"[127.0.0.1]:{port} " + " ".join((keys / "portal.pub").read_text().split()[:2]) + "\n"
        )
        (root / "index.html").unlink()
        with pytest.raises(PublishError):
            publish.status_publish()
        assert not (root / "index.html").exists()
    finally:
        stop(proc)


PUBLIC_READ = {  # deploy/README.md, "Off-site status page": the policy that makes the page public
    "Version": "2012-10-17",
    "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::status-page/public/*",
    }],
}  # fmt: skip


@pytest.fixture
def s3_server(scratch):
    """moto's server mode: a real S3-compatible HTTP server on loopback (signature checks,
    buckets, objects with their headers), standing in for a store that cannot exist here."""
    server = Path(sys.executable).with_name("moto_server")
    port = free_port()
    log = scratch / "moto.log"
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=log.open("wb"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port, proc=proc, log=log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.mark.django_db
def test_the_page_reaches_an_s3_compatible_store(s3_server, settings):
    import boto3

    settings.PORTAL_STATUS_PUBLISH_TARGET = "s3://status-page/public"
    settings.PORTAL_STATUS_PUBLISH_S3_ENDPOINT = s3_server
    settings.PORTAL_STATUS_PUBLISH_S3_ACCESS_KEY = "portal"
    settings.PORTAL_STATUS_PUBLISH_S3_SECRET_KEY = "portal-secret"
    store = boto3.client(
        "s3", endpoint_url=s3_server, region_name="us-east-1",
        aws_access_key_id="portal", aws_secret_access_key="portal-secret",
    )  # fmt: skip
    incident_declare(actor=None, title="Uplink down", title_de="Uplink ausgefallen")
    # No bucket yet: the publish fails for the task to retry, naming the store's answer.
    with pytest.raises(PublishError, match="NoSuchBucket"):
        publish.status_publish()
    store.create_bucket(Bucket="status-page")
    publish.status_publish()
    page = store.get_object(Bucket="status-page", Key="public/index.html")
    assert page["ContentType"] == "text/html; charset=utf-8"
    assert page["CacheControl"] == "no-cache"
    english = page["Body"].read().decode()
    assert "Uplink down" in english
    german = store.get_object(Bucket="status-page", Key="public/de/index.html")
    assert "Uplink ausgefallen" in german["Body"].read().decode()
    # Every static file the page names is in the store too (the page is served from there).
    for name in re.findall(r'(?:href|src)="/static/([^"?#]+)"', english):
        store.head_object(Bucket="status-page", Key=f"public/static/{name}")
    # Read back over plain HTTP without credentials, as a browser fetches it, once the bucket's
    # policy lets anyone read the prefix (deploy/README.md; the store refused before: 403).
    url = f"{s3_server}/status-page/public/index.html"
    with pytest.raises(urllib.error.HTTPError, match="403"):
        urllib.request.urlopen(url, timeout=5)  # noqa: S310 (loopback)
    store.put_bucket_policy(Bucket="status-page", Policy=json.dumps(PUBLIC_READ))
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 (loopback)
        assert "Uplink down" in r.read().decode()
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"


@pytest.mark.django_db
@pytest.mark.parametrize("target", ["s3://", "s3://UPPER/x", "s3://b/../x", "s3://ok-bucket/a b"])
def test_an_s3_target_that_names_no_bucket_is_refused(settings, target):
    settings.PORTAL_STATUS_PUBLISH_TARGET = target
    with pytest.raises(PublishError, match="neither a directory nor"):
        publish.status_publish()


@pytest.mark.django_db
def test_an_unreachable_s3_store_fails_for_the_task_to_retry(settings):
    settings.PORTAL_STATUS_PUBLISH_TARGET = "s3://status-page"
    settings.PORTAL_STATUS_PUBLISH_S3_ENDPOINT = f"http://127.0.0.1:{free_port()}"  # nobody
    settings.PORTAL_STATUS_PUBLISH_S3_ACCESS_KEY = "a"
    settings.PORTAL_STATUS_PUBLISH_S3_SECRET_KEY = "b"
    with pytest.raises(PublishError, match="S3 upload to s3://status-page failed"):
        publish.status_publish()
