"""Ports as typed values: `PortRange.parse("8000-8010")` for forms, the API and services."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.translation import gettext as _

PORT_MIN = 1
PORT_MAX = 65535
_RANGE_RE = re.compile(r"^\s*(\d{1,6})\s*(?:[-–]\s*(\d{1,6})\s*)?$")  # noqa: RUF001 - en dash


class PortRangeError(ValueError):
    """The text is not a port or port range; the message says what is wrong."""


@dataclass(frozen=True, slots=True, order=True)
class PortRange:
    """An inclusive range of ports 1..65535 (a single port is first == last)."""

    first: int
    last: int

    def __post_init__(self) -> None:
        for port in (self.first, self.last):
            if not PORT_MIN <= port <= PORT_MAX:
                raise PortRangeError(
                    _("Port %(port)d does not exist: ports go from 1 to 65535.") % {"port": port}
                )
        if self.first > self.last:
            raise PortRangeError(
                _("%(first)d-%(last)d is reversed: write the lower port first.")
                % {"first": self.first, "last": self.last}
            )

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """`8080` or `8000-8010` (spaces tolerated); PortRangeError otherwise."""
        match = _RANGE_RE.match(str(text))
        if match is None:
            raise PortRangeError(_("Write a port such as 8080 or a range such as 8000-8010."))
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        return cls(first, last)

    @property
    def size(self) -> int:
        """How many ports the range holds."""
        return self.last - self.first + 1

    def overlaps(self, other: PortRange) -> bool:
        """True when the ranges share a port."""
        return self.first <= other.last and other.first <= self.last

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def protocols_overlap(a: str, b: str) -> bool:
    """tcp and udp are apart; both overlaps either."""
    return a == b or "both" in (a, b)


def port_text(first: int | None, last: int | None) -> str:
    """8080 or 8000-8010 ('' for no ports)."""
    if first is None or last is None:
        return ""
    return str(first) if first == last else f"{first}-{last}"
