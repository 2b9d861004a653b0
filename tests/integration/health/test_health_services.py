"""The health beat's reads of a host: the content digest only once per interval."""

import pytest


@pytest.mark.django_db
def test_the_digest_is_read_back_at_most_once_per_interval(settings):
    from datetime import timedelta

    from django.utils import timezone

    from apps.firewall.models import FirewallHost
    from apps.health.services import _digest_args

    settings.PORTAL_HEALTH_DIGEST_INTERVAL = 300
    host = FirewallHost.objects.create(name="big", address="10.255.255.11")
    assert _digest_args(host) == ()  # never read back: read it now
    host.digest_checked_at = timezone.now() - timedelta(seconds=10)
    assert _digest_args(host) == ("--no-digest",)
    host.digest_checked_at = timezone.now() - timedelta(seconds=301)
    assert _digest_args(host) == ()
