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


HEADER = "building,building_name,room,ipv4_subnet,ipv6_prefix\n"
GOOD = "A,House A,101,10.100.1.0/24,2001:db8:100:100::/56\nA,House A,102,,\n"
MALFORMED = {
    "wrong columns": (
        b"building,floor,room\nA,1,101\n",
        "Line 1: unknown column “floor”; the columns are building, building_name, room",
    ),
    "no header": (
        GOOD.encode(),
        "Line 1: no header: the first line must name the columns",
    ),
    "a header without room": (
        b"building,building_name\nA,House A\n",
        "Line 1: the column “room” is missing.",
    ),
    "empty file": (b"", "Line 1: the file is empty"),
    "bad encoding": (
        (HEADER + GOOD).encode() + "B,Haus Bär,1,,\n".encode("latin-1"),
        "Line 4: byte 0xe4 is not UTF-8 text; save the file as UTF-8",
    ),
    "binary": (
        (HEADER + GOOD).encode() + b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        "Line 6: binary data (a NUL byte)",
    ),
    "overlong room": (
        (HEADER + GOOD + "B,House B," + "9" * 17 + ",,\n").encode(),
        "Line 4: room is longer than 16 characters.",
    ),
    "overlong building name": (
        (HEADER + GOOD + "B," + "x" * 101 + ",1,,\n").encode(),
        "Line 4: building_name is longer than 100 characters.",
    ),
    "overlong line": (
        (HEADER + GOOD + "B,House B,1,," + "x" * 5000 + "\n").encode(),
        "Line 4: the line is longer than 4096 bytes",
    ),
    "swapped IPv4/IPv6 columns": (
        (HEADER + GOOD + "B,House B,1,2001:db8:200::/56,10.100.2.0/24\n").encode(),
        "Line 4: ipv4_subnet holds the IPv6 network 2001:db8:200::/56: are ipv4_subnet and "
        "ipv6_prefix swapped?",
    ),
    "too few fields": (
        (HEADER + GOOD + "B,House B,1\n").encode(),
        "Line 4: 3 fields, but the header names 5 columns.",
    ),
    "too many fields": (
        (HEADER + GOOD + "B,House B,1,,,extra\n").encode(),
        "Line 4: 6 fields, but the header names 5 columns.",
    ),
    "not a network": (
        (HEADER + GOOD + "B,House B,1,10.100.2.0/33,\n").encode(),
        "Line 4: ipv4_subnet “10.100.2.0/33” is not a network",
    ),
    "two subnets for one building": (
        (HEADER + GOOD + "A,House A,103,10.100.9.0/24,\n").encode(),
        "Line 4: building A has the network 10.100.1.0/24 on line 2.",
    ),
    "an unterminated quote": (
        (HEADER + GOOD + 'B,"House B,1,,\n').encode(),
        "Line 4:",
    ),
}


# The command's real entry point closes the database connections when it ends: transactional.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_file_ends_with_one_line_naming_the_line_and_exit_1(case, tmp_path, capsys):
    from django.core.management import ManagementUtility

    from apps.audit.models import AuditEntry

    data, message = MALFORMED[case]
    path = tmp_path / "rooms.csv"
    path.write_bytes(data)
    with pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "import_rooms", str(path)]).execute()
    assert exit_.value.code == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1  # one line
    assert err.startswith(f"CommandError: {path}: Line ")
    assert message in err
    assert err.endswith("(nothing was imported)\n")
    assert not Building.objects.exists()
    assert not Room.objects.exists()
    assert not Subnet.objects.exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_missing_file_is_one_line_too(tmp_path, capsys):
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "import_rooms", str(tmp_path / "nope.csv")]).execute()
    assert exit_.value.code == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_blank_lines_and_a_byte_order_mark_are_fine(tmp_path):
    path = tmp_path / "rooms.csv"
    path.write_bytes(("\ufeff" + HEADER + GOOD + "\n\n").encode())
    call_command("import_rooms", str(path))
    assert sorted(Room.objects.values_list("label", flat=True)) == ["A-101", "A-102"]
    assert list(Room.objects.order_by("label").values_list("ipv6_prefix", flat=True)) == [
        "2001:db8:100:101::/64",
        "2001:db8:100:102::/64",
    ]


def test_the_admin_upload_names_the_line_too(make_user):
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    data, _message = MALFORMED["swapped IPv4/IPv6 columns"]
    response = client.post(
        "/admin/members/building/import-csv/", {"file": SimpleUploadedFile("r.csv", data)}
    )
    assert response.status_code == 200
    assert "Line 4: ipv4_subnet holds the IPv6 network" in response.content.decode()
    assert not Room.objects.exists()


@pytest.fixture
def reserved():
    """A registration range, a management network and a site's member gateway already there."""
    from apps.dhcp.models import RegistrationRange
    from apps.firewall.models import Site
    from apps.network.models import ManagementNetwork

    other = Building.objects.create(code="R", name="House R")
    RegistrationRange.objects.create(building=other, network="10.100.250.0/24")
    ManagementNetwork.objects.create(network="10.255.255.0/28", note="lab")
    Site.objects.get_or_create(name="north", defaults={"gateway4": "10.100.0.1"})


@pytest.mark.parametrize(
    ("subnet", "names"),
    [
        ("10.100.250.0/25", "registration range 10.100.250.0/24"),
        ("10.255.255.0/24", "management network 10.255.255.0/28"),
        ("10.100.0.0/24", "holds the gateway 10.100.0.1 of site"),
    ],
)
def test_a_subnet_overlapping_a_registration_range_management_or_gateway_is_refused(
    reserved, tmp_path, make_user, subnet, names
):
    """N6: import_rooms and the admin refuse it, naming what it overlaps, and change nothing."""
    path = tmp_path / "rooms.csv"
    path.write_text(f"{HEADER}C,House C,1,{subnet},\n")
    with pytest.raises(CommandError, match=rf"Line 2: .*{names}"):
        call_command("import_rooms", str(path))
    assert not Building.objects.filter(code="C").exists()
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    building = Building.objects.create(code="D", name="House D")
    response = client.post(
        "/admin/network/subnet/add/", {"building": building.pk, "network": subnet}
    )
    assert response.status_code == 200
    assert names in response.content.decode()
    assert not Subnet.objects.exists()
