"""The audit trail: who, what, when, old and new values; shown on the object's page."""

import pytest
from django.test import Client

from apps.audit.models import AuditEntry
from apps.network.services import device_change
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


def test_entries_name_actor_object_and_old_new_values():
    actor = UserFactory(username="vic", roles=["volunteer"])
    member = member_active()
    device = device_add(member, name="a")
    device_change(device=device, name="b", actor=actor)
    entry = AuditEntry.objects.get(action="device.change")
    assert (entry.actor, entry.actor_name, entry.member) == (actor, "vic", member)
    assert entry.changes == {"name": ["a", "b"]}
    assert entry.object_id == str(device.pk)


def test_admin_pages_show_the_trail(make_user):
    member = member_active()
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    from apps.network.models import Subnet

    subnet = Subnet.objects.filter(building=member.room.building).first()
    from apps.audit.services import audit_record

    audit_record(actor=None, action="subnet.note", obj=subnet)
    body = client.get(f"/admin/network/subnet/{subnet.pk}/change/").content.decode()
    assert "The portal made a change to" in body
    assert "(subnet note)" in body
