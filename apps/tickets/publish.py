"""The public status page published as static files to a place outside the network it describes
(deploy/README.md, "Off-site status page"): a second web host over SSH (rsync), an S3-compatible
store (s3://bucket/prefix, boto3 with the store's endpoint), or a local directory that something
else serves or copies (nginx in the lab and tests).

A change asks for a publish after its commit (`status_publish_soon`); at most one publish waits
in the queue, so a burst of changes makes one or two publishes, each of the state at that time.
The task renders the page in every language and copies it with retries; the portal never waits.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import structlog
from django.conf import settings
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.storage import staticfiles_storage
from django.template.loader import render_to_string
from django.utils import translation

from apps.infra.redis import redis_client
from apps.tickets import dispatch
from apps.tickets.status import status_data

log = structlog.get_logger(__name__)

QUEUED_KEY = "tickets:status:publish:queued"
QUEUED_TTL = 60  # a lost task stops blocking new publishes after this long
# user@host:/path, as rsync over SSH takes it; nothing else reaches the command line.
SSH_TARGET = re.compile(
    r"^(?P<user>[a-z_][a-z0-9_-]{0,31})@(?P<host>[A-Za-z0-9.:\[\]-]{1,253}):(?P<path>/[A-Za-z0-9._/-]{1,200})$"
)
# s3://bucket[/prefix]: a bucket name as S3 allows it, a prefix of plain path characters.
S3_TARGET = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[A-Za-z0-9._/-]{0,200}))?$"
)
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
}
STATIC_HREF = re.compile(r'(?:href|src)="/static/([^"?#]+)"')


class PublishError(RuntimeError):
    """The copy to the off-site place failed (the task retries)."""


def publish_target() -> str:
    """The configured target, checked: "" (off), an absolute directory, user@host:/path or
    s3://bucket/prefix."""
    target = settings.PORTAL_STATUS_PUBLISH_TARGET.strip()
    s3 = S3_TARGET.match(target)
    if s3 and ".." in (s3["prefix"] or ""):
        s3 = None
    if target and not (
        SSH_TARGET.match(target) or s3 or (target.startswith("/") and ".." not in target)
    ):
        raise PublishError(
            "PORTAL_STATUS_PUBLISH_TARGET is neither a directory nor user@host:/path nor "
            f"s3://bucket/prefix: {target!r}"
        )
    return target


def status_publish_soon() -> None:
    """Ask for a publish (after a change, on commit): never raises, never waits."""
    if not settings.PORTAL_STATUS_PUBLISH_TARGET:
        return
    try:
        if redis_client().set(QUEUED_KEY, "1", nx=True, ex=QUEUED_TTL):
            dispatch.status_publish()
    except Exception as exc:  # Redis or the broker down: the beat backstop publishes later
        log.warning("status.publish_not_queued", error=str(exc))


def status_changed_receiver(**_kwargs: object) -> None:
    """apps.tickets.status.status_changed: the public page changed, publish it soon."""
    status_publish_soon()


def status_pages_render(directory: Path) -> list[Path]:
    """Write index.html (English) and de/index.html (German) and the static files they use."""
    data, stale = status_data()
    written = []
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            html = render_to_string(
                "status/status_page.html",
                {"data": data, "stale": stale, "LANGUAGE_CODE": code, "offsite": True},
            )
        page = directory / (
            "index.html" if code == settings.LANGUAGE_CODE[:2] else f"{code}/index.html"
        )
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(html, encoding="utf-8")
        written.append(page)
        for name in STATIC_HREF.findall(html):
            source = _static_source(name)
            if source:
                copy = directory / "static" / name
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, copy)
    return written


def _static_source(name: str) -> str | None:
    """The file behind a /static/ URL: collected (hashed names in production) or found in the
    apps' static directories (development)."""
    try:
        path = staticfiles_storage.path(name)
    except NotImplementedError:  # pragma: no cover - a remote storage
        path = ""
    if path and Path(path).is_file():
        return path
    found = finders.find(name)
    return found if isinstance(found, str) else None


def status_publish() -> str:
    """Render and copy the page to the target; returns the target ("" when off)."""
    redis_client().delete(QUEUED_KEY)  # a change from now on queues the next publish
    target = publish_target()
    if not target:
        return ""
    with tempfile.TemporaryDirectory(prefix="status-") as tmp:
        status_pages_render(Path(tmp))
        if target.startswith("/"):
            _copy_local(Path(tmp), Path(target))
        elif target.startswith("s3://"):
            _copy_s3(Path(tmp), target)
        else:
            _copy_ssh(Path(tmp), target)
    log.info("status.published", target=target)
    return target


def _copy_local(source: Path, target: Path) -> None:
    """Each file replaced atomically (a reader never sees half a page)."""
    for path in sorted(source.rglob("*")):
        if path.is_file():
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            shutil.copyfile(path, part)
            part.chmod(0o644)
            part.replace(dest)


def _copy_ssh(source: Path, target: str) -> None:
    """rsync over SSH with the portal's key and a pinned host key (no prompt, no shell)."""
    ssh = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
    ]  # fmt: skip
    if settings.PORTAL_STATUS_PUBLISH_SSH_KEY:
        ssh += ["-i", settings.PORTAL_STATUS_PUBLISH_SSH_KEY]
    if settings.PORTAL_STATUS_PUBLISH_KNOWN_HOSTS:
        ssh += ["-o", f"UserKnownHostsFile={settings.PORTAL_STATUS_PUBLISH_KNOWN_HOSTS}"]
    if settings.PORTAL_STATUS_PUBLISH_SSH_PORT:
        ssh += ["-p", str(int(settings.PORTAL_STATUS_PUBLISH_SSH_PORT))]
    command = [
        "rsync", "-rt", "--delay-updates", "--chmod=D755,F644", "-e", " ".join(ssh),
        f"{source}/", f"{target.rstrip('/')}/",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PublishError(str(exc)) from exc
    if done.returncode != 0:
        raise PublishError(done.stderr.strip()[-500:] or f"rsync exited {done.returncode}")


def _copy_s3(source: Path, target: str) -> None:
    """PUT every file into the bucket (each PUT replaces one object atomically): the static
    files first, the pages last, so a page never names a file the store does not hold yet.
    Pages are sent with Cache-Control no-cache (the page changes while an outage unfolds)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    match = S3_TARGET.match(target)
    if match is None:  # publish_target checked it already
        raise PublishError(f"not an S3 target: {target!r}")
    bucket, prefix = match["bucket"], (match["prefix"] or "").strip("/")
    client = boto3.client(
        "s3",
        endpoint_url=settings.PORTAL_STATUS_PUBLISH_S3_ENDPOINT or None,
        region_name=settings.PORTAL_STATUS_PUBLISH_S3_REGION or None,
        # Empty: boto3's own chain (AWS_* variables, ~/.aws, an instance role).
        aws_access_key_id=settings.PORTAL_STATUS_PUBLISH_S3_ACCESS_KEY or None,
        aws_secret_access_key=settings.PORTAL_STATUS_PUBLISH_S3_SECRET_KEY or None,
        config=Config(
            connect_timeout=10,
            read_timeout=30,
            retries={"max_attempts": 2, "mode": "standard"},  # the Celery task retries longer
            s3={"addressing_style": settings.PORTAL_STATUS_PUBLISH_S3_ADDRESSING},
        ),
    )
    files = sorted(
        (p for p in source.rglob("*") if p.is_file()), key=lambda p: (p.suffix == ".html", str(p))
    )
    try:
        for path in files:
            key = "/".join(filter(None, [prefix, path.relative_to(source).as_posix()]))
            extra = {"ContentType": CONTENT_TYPES.get(path.suffix, "application/octet-stream")}
            if path.suffix == ".html":
                extra["CacheControl"] = "no-cache"
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), **extra)
    except (BotoCoreError, ClientError) as exc:
        raise PublishError(f"S3 upload to {target} failed: {exc}"[:500]) from exc
