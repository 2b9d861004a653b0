"""A real Celery worker writes audit entries with the content types the database holds now.

Django keeps ContentType ids in a per-process cache. A worker lives on while the database under
it is restored (or, in tests, flushed: the content types come back with other ids), and it wrote
its audit entries with the ids it had read first: an FK error, or an entry naming another type.
Each task now starts with an empty cache (apps/infra/celery.py)."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.infra.celery import app
from apps.members.models import Member
from tests.celery_proc import celery_start, celery_stop, wait_until
from tests.factories import member_on_test

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "workers.network.expire_test_accesses"  # ends expired test accesses, audited


@pytest.fixture
def worker(tmp_path):
    """One worker process for the whole test, on a queue of its own."""
    queue = f"content-types-{os.getpid()}"
    log = tmp_path / "worker.log"
    proc = celery_start(
        "worker", "--pool", "solo", "-Q", queue, "--hostname", f"{queue}@%h",
        "--without-mingle", "--without-gossip", "--loglevel", "INFO", log=log,
    )  # fmt: skip
    try:
        assert wait_until(lambda: "ready" in log.read_text(), 60), log.read_text()
        yield queue, log
    finally:
        celery_stop(proc)


def member_expired() -> Member:
    member = member_on_test(days=3)
    Member.objects.filter(pk=member.pk).update(
        test_access_until=timezone.localdate() - dt.timedelta(days=1)
    )
    return member


def ended_by_the_worker(member: Member, queue: str, log) -> AuditEntry:
    app.send_task(TASK, queue=queue)
    entry = wait_until(
        lambda: (
            AuditEntry.objects.filter(
                member_id=member.pk, object_id=str(member.pk), action="member.pending"
            )
            .select_related("content_type")
            .first()
        ),
        30,
    )
    assert entry, log.read_text()[-3000:]
    return entry


def test_a_worker_writes_audit_entries_with_the_content_types_after_a_restore(worker):
    queue, log = worker
    first = ended_by_the_worker(member_expired(), queue, log)
    before = ContentType.objects.get_for_model(Member)
    assert first.content_type == before

    # What a restore from another installation (or pytest-django's flush between transactional
    # tests) does: every row goes, the content types come back under new ids.
    call_command("flush", interactive=False, reset_sequences=False, verbosity=0)
    after = ContentType.objects.get_for_model(Member)
    assert after.pk != before.pk
    assert not ContentType.objects.filter(pk=before.pk).exists()

    second = ended_by_the_worker(member_expired(), queue, log)
    assert second.content_type_id == after.pk
    assert second.content_type.model_class() is Member
    assert "IntegrityError" not in log.read_text()
