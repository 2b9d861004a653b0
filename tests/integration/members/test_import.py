"""CSV import of buildings and rooms: command and upload; all or nothing; again changes nothing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from apps.members.models import Building, Room
from apps.network.models import Subnet

pytestmark = pytest.mark.django_db

CSV = """building,building_name,room,ipv4_subnet,ipv6_prefix
A,House A,101,10.100.1.0/24,2001:db8:100:100::/56
A,House A,102,,
B,House B,001,10.100.2.0/24,
"""


def test_command_imports_and_a_second_run_changes_nothing(tmp_path):
    path = tmp_path / "rooms.csv"
    path.write_text(CSV)
    call_command("import_rooms", str(path))
    assert Building.objects.count() == 2
    assert sorted(Room.objects.values_list("label", flat=True)) == ["A-101", "A-102", "B-001"]
    assert Room.objects.get(label="A-101").ipv6_prefix == "2001:db8:100:101::/64"
    assert Room.objects.get(label="B-001").ipv6_prefix is None
    assert Subnet.objects.count() == 3
    call_command("import_rooms", str(path))
    assert Room.objects.count() == 3


def test_a_bad_line_imports_nothing(tmp_path):
    path = tmp_path / "rooms.csv"
    path.write_text(CSV + "C,House C,1,10.100.1.128/25,\n")  # overlaps A's subnet
    with pytest.raises(CommandError, match=r"Line 5: .*overlaps"):
        call_command("import_rooms", str(path))
    assert not Building.objects.exists()
    assert not Room.objects.exists()


def test_admin_upload(make_user):
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    url = "/admin/members/building/import-csv/"
    assert client.get(url).status_code == 200
    response = client.post(url, {"file": SimpleUploadedFile("rooms.csv", CSV.encode())})
    assert response.status_code == 302
    assert Room.objects.count() == 3
    response = client.post(url, {"file": SimpleUploadedFile("rooms.csv", b"building,room\n,1\n")})
    assert "must not be empty" in response.content.decode()
