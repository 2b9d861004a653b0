"""MAC address parsing: every common notation in, one normalised form out."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

_SEPARATORS = re.compile(r"[\s:.\-]")
_HEX12 = re.compile(r"^[0-9a-f]{12}$")
# aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF, aabb.ccdd.eeff, aabbccddeeff, aabb-ccdd-eeff
_NOTATIONS = re.compile(
    r"^(?:[0-9a-f]{2}([:\-])(?:[0-9a-f]{2}\1){4}[0-9a-f]{2}"
    r"|[0-9a-f]{4}([.\-:])[0-9a-f]{4}\2[0-9a-f]{4}"
    r"|[0-9a-f]{6}-[0-9a-f]{6}"
    r"|[0-9a-f]{12})$"
)


def mac_parse(text: str) -> str | None:
    """The MAC as aa:bb:cc:dd:ee:ff when `text` is one in a common notation, else None."""
    value = text.strip().lower()
    if not _NOTATIONS.match(value):
        return None
    digits = _SEPARATORS.sub("", value)
    if not _HEX12.match(digits):
        return None
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def mac_normalize(text: str) -> str:
    """Parse `text` as a MAC address; ValidationError with a reason when it is not one."""
    mac = mac_parse(text)
    if mac is None:
        raise ValidationError(
            _(
                "“%(value)s” is not a MAC address. Use six pairs of hex digits, e.g. "
                "aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF, aabb.ccdd.eeff or aabbccddeeff."
            ),
            code="invalid",
            params={"value": text.strip()},
        )
    return mac


def mac_validate_unicast(mac: str) -> None:
    """Refuse addresses a device cannot own, saying why."""
    if mac == "00:00:00:00:00:00":
        raise ValidationError(
            _("00:00:00:00:00:00 is the all-zero address, which no device has; check the label."),
            code="zero",
        )
    if mac == "ff:ff:ff:ff:ff:ff":
        raise ValidationError(
            _("ff:ff:ff:ff:ff:ff is the broadcast address, which no single device has."),
            code="broadcast",
        )
    if int(mac[:2], 16) & 1:
        raise ValidationError(
            _(
                "%(mac)s is a multicast address (the first byte is odd), so it names a group of "
                "devices, not one device."
            ),
            code="multicast",
            params={"mac": mac},
        )


def eui64_interface_id(mac: str) -> int:
    """The modified EUI-64 interface identifier of `mac` (RFC 4291), as a 64-bit integer."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    return int.from_bytes(bytes(eui), "big")


def mac_fragment(query: str) -> str:
    """The hex digits of what may be part of a MAC ("ee:ff", "ddeeff", "cafe", "aabb.cc"), or
    ""."""
    digits = re.sub(r"[:\-.]", "", query).lower()
    return digits if 4 <= len(digits) <= 11 and re.fullmatch(r"[0-9a-f]+", digits) else ""
