"""A building's registration range with one walled device whose lease the collector has seen."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.dhcp.models import RegistrationRange
from apps.dhcp.services import LeaseRow, leases_store
from apps.dhcp.walled import registration_networks_forget
from apps.firewall.models import FirewallHost
from tests.factories import member_active

WALLED = "10.100.250.17"
MAC = "02:aa:bb:cc:dd:17"


@pytest.fixture
def garden():
    member = member_active()
    RegistrationRange.objects.create(building=member.room.building, network="10.100.250.0/24")
    registration_networks_forget()
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)
    now = timezone.now()
    leases_store(host=host, rows=[LeaseRow(WALLED, MAC, now, now + dt.timedelta(seconds=120), "")])
    yield member
    registration_networks_forget()
