"""Abuse's part in a membership (apps/members/extensions.py): the address history in the
member's data download; an erased member's room stays are kept while the history holds them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from apps.abuse.models import AddressHolding
from apps.members.extensions import MemberExtension
from apps.members.models import Member
from apps.members.privacy import data_rows

HOLDING_FIELDS = ("address", "kind", "state", "period", "device_name", "mac")


class AbuseMemberExtension(MemberExtension):
    """Who held which address when, as far as the member is concerned."""

    def member_data(self, *, member: Member) -> dict[str, Any]:
        holdings = AddressHolding.objects.filter(member=member).order_by("period")
        return {"address_history": data_rows(holdings, *HOLDING_FIELDS)}

    def members_kept(self) -> QuerySet[Any]:
        return AddressHolding.objects.filter(member_id__isnull=False).values("member_id")
