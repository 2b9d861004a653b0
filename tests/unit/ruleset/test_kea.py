"""The kea-dhcp4 artefact: typed DHCP input, refused nonsense, and a text real Kea accepts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.ruleset.builders import make_snapshot
from workers.ruleset import snapshot as s
from workers.ruleset.bundle import compile_bundle


def dhcp(**kw) -> s.Dhcp:
    base = {
        "network": "10.100.0.0/16",
        "router": "10.100.0.1",
        "dns_servers": ("203.0.113.53",),
        "domain": "dorm.example.org",
        "pools": (("10.100.250.1", "10.100.250.127"),),
        "reservations": (
            ("02:00:00:00:00:0b", "10.100.0.11"),
            ("02:00:00:00:00:0a", "10.100.0.10"),
        ),
        "control_socket": "/run/kea/kea4-ctrl-socket",
        "lease_file": "/var/lib/kea/kea-leases4.csv",
    }
    return s.Dhcp(**{**base, **kw})


def with_dhcp(d: s.Dhcp | None) -> s.Snapshot:
    snap = make_snapshot()
    return s.Snapshot(policy=snap.policy, host=snap.host, members=snap.members, dhcp=d)


def test_a_host_without_dhcp_carries_no_kea_artefact():
    assert "kea-dhcp4" not in compile_bundle(with_dhcp(None)).artefacts


def test_the_config_holds_every_reservation_the_pool_and_the_options():
    bundle = compile_bundle(with_dhcp(dhcp()))
    config = json.loads(bundle.artefacts["kea-dhcp4"])["Dhcp4"]
    subnet = config["subnet4"][0]
    assert subnet["subnet"] == "10.100.0.0/16"
    assert subnet["reservations"] == [  # sorted by MAC: equal data, equal text
        {"hw-address": "02:00:00:00:00:0a", "ip-address": "10.100.0.10"},
        {"hw-address": "02:00:00:00:00:0b", "ip-address": "10.100.0.11"},
    ]
    assert subnet["pools"] == [
        {"pool": "10.100.250.1 - 10.100.250.127", "client-class": "unregistered"}
    ]
    options = {o["name"]: o["data"] for o in subnet["option-data"]}
    assert options == {
        "routers": "10.100.0.1",
        "domain-name-servers": "203.0.113.53",
        "domain-name": "dorm.example.org",
    }
    assert config["valid-lifetime"] == 3600
    assert config["renew-timer"] == 1800
    assert config["client-classes"][0]["valid-lifetime"] == 120


def test_the_kea_text_is_part_of_the_bundle_version():
    one = compile_bundle(with_dhcp(dhcp()))
    other = compile_bundle(with_dhcp(dhcp(reservations=(("02:00:00:00:00:0a", "10.100.0.12"),))))
    assert one.content_hash != other.content_hash
    assert one.artefact_hashes["nft"] == other.artefact_hashes["nft"]
    assert one.artefact_hashes["kea-dhcp4"] != other.artefact_hashes["kea-dhcp4"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reservations": (("02:00:00:00:00:0a", "10.101.0.1"),)}, "outside the member network"),
        ({"reservations": (("02:00:00:00:00:0a", "10.100.0.1"),)}, "or the router"),
        (
            {
                "reservations": (
                    ("02:00:00:00:00:0a", "10.100.0.5"),
                    ("02:00:00:00:00:0a", "10.100.0.6"),
                )
            },
            "reserved twice",
        ),
        (
            {
                "reservations": (
                    ("02:00:00:00:00:0a", "10.100.0.5"),
                    ("02:00:00:00:00:0b", "10.100.0.5"),
                )
            },
            "is reserved for",
        ),
        ({"reservations": (("02:00:00:00:00:0a", "10.100.250.5"),)}, "inside a registration pool"),
        ({"reservations": (("02:00:00:00:00:0A", "10.100.0.5"),)}, "lower-case hex"),
        ({"reservations": (('02:00:00:00:00:0a"}', "10.100.0.5"),)}, "lower-case hex"),
        ({"pools": (("10.100.250.9", "10.100.250.1"),)}, "ascending range"),
        (
            {"pools": (("10.100.250.1", "10.100.250.9"), ("10.100.250.5", "10.100.250.20"))},
            "overlap",
        ),
        ({"router": "10.101.0.1"}, "outside the member network"),
        ({"domain": 'x", "evil": "1'}, "not a domain name"),
        ({"control_socket": "/run/kea/a b"}, "safe characters"),
        ({"lease_file": "relative.csv"}, "safe characters"),
        ({"lease_seconds": 5}, "lease seconds"),
        ({"dns_servers": ("2001:db8::53",)}, "DNS servers"),
    ],
)
def test_nonsense_is_refused_with_the_offending_value_named(change, message):
    with pytest.raises(s.SnapshotError, match=message):
        dhcp(**change)


def test_dhcp_survives_the_json_round_trip():
    snap = with_dhcp(dhcp(interfaces=("dorm0",)))
    again = s.Snapshot.from_json(snap.to_json())
    assert again == snap
    assert again.dhcp.reservations == snap.dhcp.reservations


# /usr/sbin is not on an ordinary user's PATH; `kea-dhcp4 -t` itself needs no root.
KEA = shutil.which("kea-dhcp4") or "/usr/sbin/kea-dhcp4"


def test_real_kea_accepts_the_generated_configuration(tmp_path):
    assert Path(KEA).exists(), "kea-dhcp4 is installed by make test (deploy/dev/packages.sh)"
    d = dhcp(
        interfaces=("lo",),  # an interface every machine has
        control_socket=str(tmp_path / "kea.sock"),
        lease_file=str(tmp_path / "leases.csv"),
    )
    path = tmp_path / "kea-dhcp4.conf"
    path.write_text(compile_bundle(with_dhcp(d)).artefacts["kea-dhcp4"])
    result = subprocess.run([KEA, "-t", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_pool_shares_of_a_pair_are_disjoint_and_cover_the_range():
    from apps.firewall.snapshot import pool_share

    first = pool_share("10.100.250.0/24", 0, 2)
    second = pool_share("10.100.250.0/24", 1, 2)
    assert first == ("10.100.250.1", "10.100.250.127")
    assert second == ("10.100.250.128", "10.100.250.254")
    assert pool_share("10.100.250.0/30", 0, 3) is None  # two usable addresses, three hosts


# --- Captive-portal detection (RFC 8910): option 114 on the walled garden's leases ---------

CAPTIVE = "https://portal.dorm.example.org/api/captive-portal/"


def captive_kea(**kw) -> dict:
    d = dhcp(captive_portal=s.CaptivePortalUrl(CAPTIVE), **kw)
    return json.loads(compile_bundle(with_dhcp(d)).artefacts["kea-dhcp4"])["Dhcp4"]


def test_registration_pools_carry_option_114_and_registered_leases_do_not():
    subnet = captive_kea()["subnet4"][0]
    assert subnet["pools"] == [
        {
            "pool": "10.100.250.1 - 10.100.250.127",
            "client-class": "unregistered",
            "option-data": [{"name": "v4-captive-portal", "data": CAPTIVE}],
        }
    ]
    # A reservation's lease takes the subnet's options only: no captive-portal URL there.
    assert "v4-captive-portal" not in {o["name"] for o in subnet["option-data"]}


def test_golden_kea_with_captive_portal():
    from tests.unit.ruleset.test_ruleset_compile import check_golden

    d = dhcp(captive_portal=s.CaptivePortalUrl(CAPTIVE))
    check_golden("small_captive.kea.json", compile_bundle(with_dhcp(d)).artefacts["kea-dhcp4"])


def test_without_a_captive_url_the_pools_name_none():
    pool = json.loads(compile_bundle(with_dhcp(dhcp())).artefacts["kea-dhcp4"])["Dhcp4"]
    assert "option-data" not in pool["subnet4"][0]["pools"][0]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://portal.dorm.example.org/api/captive-portal/", "https://"),
        ("https://203.0.113.80/api/captive-portal/", "not a domain name"),
        ("https://Portal.example.org/", "not a domain name"),
        ("https://user@portal.example.org/", "not a domain name"),
        ("https://portal.example.org:0/", "not a port number"),
        ("https://portal.example.org:99999/", "not a port number"),
        ("https://portal.example.org/a b", "characters a URL path cannot have"),
        ('https://portal.example.org/x"}, {"name": "routers', "characters a URL path cannot have"),
        ("https://portal.example.org/?next=/", "characters a URL path cannot have"),
        ("https://portal.example.org/#top", "characters a URL path cannot have"),
        ("https://portal.example.org/a,b", "characters a URL path cannot have"),
        ("https://portal.example.org/ü", "ASCII URL"),
        ("https://portal.example.org/" + "a" * 240, "at most 255 bytes"),
        (None, "ASCII URL"),
    ],
)
def test_a_captive_url_that_is_not_a_plain_https_url_is_refused(url, message):
    with pytest.raises(s.SnapshotError, match=message):
        s.CaptivePortalUrl(url)


def test_dhcp_takes_only_a_typed_captive_url():
    with pytest.raises(s.SnapshotError, match="no CaptivePortalUrl"):
        dhcp(captive_portal=CAPTIVE)


def test_the_captive_url_survives_the_json_round_trip():
    snap = with_dhcp(dhcp(captive_portal=s.CaptivePortalUrl(CAPTIVE)))
    again = s.Snapshot.from_json(snap.to_json())
    assert again == snap
    assert again.dhcp.captive_portal.text == CAPTIVE


def test_the_origin_is_scheme_host_and_port():
    assert (
        s.CaptivePortalUrl("https://p.example.org:8443/x/").origin == "https://p.example.org:8443"
    )


def test_real_kea_accepts_option_114_in_the_registration_pool(tmp_path):
    d = dhcp(
        interfaces=("lo",),
        control_socket=str(tmp_path / "kea.sock"),
        lease_file=str(tmp_path / "leases.csv"),
        captive_portal=s.CaptivePortalUrl(CAPTIVE),
    )
    path = tmp_path / "kea-dhcp4.conf"
    path.write_text(compile_bundle(with_dhcp(d)).artefacts["kea-dhcp4"])
    result = subprocess.run([KEA, "-t", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
