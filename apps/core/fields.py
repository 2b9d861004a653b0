"""PostgreSQL network types as model fields: cidr and macaddr (inet is GenericIPAddressField)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Lookup
from django.utils.translation import gettext_lazy as _

from apps.core.mac import mac_normalize


class CidrField(models.Field):
    """A network such as 10.100.1.0/24 or 2001:db8:100:100::/56, stored as PostgreSQL `cidr`."""

    description = _("IP network (cidr)")

    def db_type(self, connection: Any) -> str:
        return "cidr"

    def to_python(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        try:
            return str(ipaddress.ip_network(str(value).strip(), strict=True))
        except ValueError as exc:
            raise ValidationError(
                _("“%(value)s” is not a network such as 10.100.1.0/24 (%(reason)s)."),
                code="invalid",
                params={"value": value, "reason": exc},
            ) from None

    def get_prep_value(self, value: Any) -> str | None:
        return self.to_python(value)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        return value


class MacAddressField(models.Field):
    """A MAC address stored as PostgreSQL `macaddr`; accepts every common notation."""

    description = _("MAC address (macaddr)")

    def db_type(self, connection: Any) -> str:
        return "macaddr"

    def to_python(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        return mac_normalize(str(value))

    def get_prep_value(self, value: Any) -> str | None:
        return self.to_python(value)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        return value


class InetAddressField(models.GenericIPAddressField):
    """A single address stored as PostgreSQL `inet`, with network-containment lookups."""


@InetAddressField.register_lookup
class NetContainedOrEqual(Lookup):
    """`address__net_contained_or_equal="10.100.1.0/24"`: the address lies in the network (<<=)."""

    lookup_name = "net_contained_or_equal"

    def get_prep_lookup(self) -> Any:
        return str(ipaddress.ip_network(str(self.rhs), strict=False))

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} <<= {rhs}::cidr", [*lhs_params, *rhs_params]


@CidrField.register_lookup
class NetContainsOrEquals(Lookup):
    """`prefix__net_contains_or_equals="2001:db8::1"`: the network holds the address (>>=)."""

    lookup_name = "net_contains_or_equals"

    def get_prep_lookup(self) -> Any:
        return str(ipaddress.ip_address(str(self.rhs).split("/")[0]))

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} >>= {rhs}::inet", [*lhs_params, *rhs_params]


@CidrField.register_lookup
class NetOverlaps(Lookup):
    """`network__net_overlaps="10.100.0.0/16"`: the two networks share an address (&&)."""

    lookup_name = "net_overlaps"

    def get_prep_lookup(self) -> Any:
        return str(ipaddress.ip_network(str(self.rhs), strict=False))

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} && {rhs}::cidr", [*lhs_params, *rhs_params]
