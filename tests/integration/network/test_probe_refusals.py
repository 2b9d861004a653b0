""" "Test my forward" on a disabled forward or opening: it says the forward is disabled (page and
API), asks nothing of the probe host and uses up none of the member's hourly tests."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from apps.audit.models import AuditEntry
from apps.network.models import NetworkSettings
from apps.network.probe import _rate_key
from apps.network.services import port_forward_change
from tests.factories import device_add, forward_add, member_active, opening_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def disabled():
    # A probe host nobody answers on: a test that did run would say "does not answer".
    NetworkSettings.objects.update_or_create(
        id=1, defaults={"probe_address": "127.0.0.9", "forward_tests_per_hour": 4}
    )
    cache.clear()
    member = member_active()
    device = device_add(member, "server")
    forward = forward_add(member, device, ports="8080")
    port_forward_change(forward=forward, actor=member.user, enabled=False)
    opening = opening_add(device, ports="8443")
    opening.enabled = False
    opening.save(update_fields=["enabled"])
    yield member, forward, opening
    cache.clear()


def test_a_disabled_forward_or_opening_is_not_tested_and_says_so(disabled):
    member, forward, opening = disabled
    client = Client()
    client.force_login(member.user)
    page = client.post(reverse("network:forward_probe", args=[forward.pk]), HTTP_HX_REQUEST="true")
    assert page.status_code == 200
    assert "This forward is disabled; enable it to test it." in page.content.decode()
    page = client.post(reverse("network:opening_probe", args=[opening.pk]), HTTP_HX_REQUEST="true")
    assert "This opening is disabled; enable it to test it." in page.content.decode()
    api = APIClient()
    api.force_authenticate(member.user)
    answer = api.post(reverse("api-port-forward-test", args=[forward.pk]))
    assert answer.status_code == 400
    assert answer.json() == {
        "non_field_errors": ["This forward is disabled; enable it to test it."]
    }
    german = client.post(
        reverse("network:forward_probe", args=[forward.pk]),
        HTTP_HX_REQUEST="true",
        HTTP_ACCEPT_LANGUAGE="de",
    ).content.decode()
    assert "Diese Weiterleitung ist deaktiviert" in german
    assert cache.get(_rate_key(member.pk)) is None  # no test used up
    assert not AuditEntry.objects.filter(action__startswith="probe").exists()
