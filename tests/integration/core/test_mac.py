"""MAC addresses: every common notation in, one form out; refusals say why."""

import pytest
from django.core.exceptions import ValidationError

from apps.core.mac import mac_normalize, mac_parse, mac_validate_unicast


@pytest.mark.parametrize(
    "text",
    [
        "aa:bb:cc:dd:ee:ff",
        "AA-BB-CC-DD-EE-FF",
        "aabb.ccdd.eeff",
        "aabbccddeeff",
        " AaBb.CcDd.EeFf ",
    ],
)
def test_every_common_notation_is_normalised(text):
    assert mac_normalize(text) == "aa:bb:cc:dd:ee:ff"


@pytest.mark.parametrize(
    "text", ["", "aa:bb:cc:dd:ee", "gg:bb:cc:dd:ee:ff", "aa:bb-cc:dd:ee:ff", "10.0.0.1"]
)
def test_garbage_is_not_a_mac(text):
    assert mac_parse(text) is None
    with pytest.raises(ValidationError, match="not a MAC address"):
        mac_normalize(text)


@pytest.mark.parametrize(
    ("mac", "why"),
    [
        ("00:00:00:00:00:00", "all-zero"),
        ("ff:ff:ff:ff:ff:ff", "broadcast"),
        ("01:00:5e:00:00:01", "multicast"),
        ("33:33:00:00:00:01", "multicast"),
    ],
)
def test_non_unicast_addresses_are_refused_with_the_reason(mac, why):
    with pytest.raises(ValidationError, match=why):
        mac_validate_unicast(mac)
