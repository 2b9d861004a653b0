"""Property-based fuzzing of every API operation from the portal's own OpenAPI schema
(schemathesis over the WSGI app, in-process, inside the test's transaction): as a member and as
an admin, no request may answer 5xx, and every documented response must match its schema.

Bounded for `make test`: FUZZ_EXAMPLES examples per operation and role (settings, env
PORTAL_FUZZ_EXAMPLES), derandomised so a failure repeats; the whole file runs in about a minute.
Nothing leaves the process: after-commit hooks (pushes, mails, Celery) never run in a test
transaction, and the probe host is not configured.
"""

from __future__ import annotations

import json
import os

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, Phase, Verbosity, given
from hypothesis import settings as hypothesis_settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from apps.firewall.models import FirewallHost
from apps.tickets.models import Incident
from apps.tickets.services import ticket_open
from tests.factories import device_add, forward_add, member_active, member_on_test, opening_add

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]

FUZZ_EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "6"))


def _schema() -> schemathesis.openapi.OpenApiSchema:
    document = SchemaGenerator().get_schema(request=None, public=True)
    raw = json.loads(OpenApiJsonRenderer().render(document, renderer_context={}))
    loaded = schemathesis.openapi.from_dict(raw)
    loaded.app = WSGIHandler()
    return loaded


schema = _schema()


@pytest.fixture
def in_process():
    """Keep the test's database connection across requests (Django's test client does so too:
    a real request would close it when it finishes)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(make_user, in_process):
    """A member with a device, forward, opening and ticket; a test access; an incident; a
    firewall host; API tokens for the member and an admin."""
    member = member_active()
    device = device_add(member)
    forward_add(member, device=device_add(member))
    opening_add(device)
    member_on_test()
    ticket_open(actor=member.user, subject="No internet", body="since noon")
    Incident.objects.create(title="Outage")
    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    admin = make_user(roles=("admin",))
    return {
        "member": Token.objects.create(user=member.user).key,
        "admin": Token.objects.create(user=admin).key,
    }


CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


def _fuzz(operation, token: str) -> None:
    """FUZZ_EXAMPLES generated requests to one operation; raises on the first failed check."""

    @given(case=operation.as_strategy())
    @hypothesis_settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    def run(case) -> None:
        response = case.call(headers={"Authorization": f"Token {token}"})
        case.validate_response(response, checks=CHECKS)

    run()


@pytest.mark.parametrize("role", ["member", "admin"])
def test_no_operation_answers_5xx_or_off_schema(role, world):
    """Every operation of the schema, one after the other on one set of data; all failures are
    reported together, each with the operation it came from."""
    failures = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 40
    for operation in operations:
        try:
            _fuzz(operation, world[role])
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
