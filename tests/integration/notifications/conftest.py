"""Fixtures of the notification tests: no flush lock left over, two firewall hosts."""

from __future__ import annotations

import pytest

from apps.notifications.services import FLUSH_LOCK_KEY


@pytest.fixture(autouse=True)
def _no_flush_lock():
    from apps.infra.redis import redis_client

    redis_client().delete(FLUSH_LOCK_KEY)
    yield
    redis_client().delete(FLUSH_LOCK_KEY)


@pytest.fixture
def hosts(db):
    from apps.firewall.models import FirewallHost

    return [
        FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11"),
        FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1),
    ]
