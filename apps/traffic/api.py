"""API: a member's traffic (their own; staff: anyone's) and the top talkers of an hour (staff).
Query parameters are validated; an unknown value answers 400 naming it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import IsStaffRole
from apps.core.moments import MomentSerializerField
from apps.firewall.models import Site
from apps.members.models import Building, Member
from apps.traffic.models import Span
from apps.traffic.selectors import PERIODS, member_traffic, top_talkers


def _query(serializer: type[serializers.Serializer], request: Request) -> serializers.Serializer:
    """The validated query parameters; an unknown parameter is refused, not ignored."""
    unknown = set(request.query_params) - set(serializer().fields)
    if unknown:
        raise ValidationError({name: ["Unknown parameter."] for name in sorted(unknown)})
    query = serializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return query


class TotalsSerializer(serializers.Serializer):
    bytes_in = serializers.IntegerField(help_text="downloaded (towards the member)")
    bytes_out = serializers.IntegerField(help_text="uploaded")


class DaySerializer(serializers.Serializer):
    day = serializers.DateField(help_text="a day in the portal's time zone")
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()


class MemberTrafficSerializer(serializers.Serializer):
    member = serializers.IntegerField(source="member.pk")
    time_zone = serializers.CharField()
    month_start = serializers.DateTimeField()
    month = TotalsSerializer()
    days = serializers.IntegerField()
    period = TotalsSerializer()
    series = DaySerializer(many=True)


class MemberTrafficQuery(serializers.Serializer):
    days = serializers.ChoiceField(choices=PERIODS, default=30, required=False)


class MemberTrafficAPI(APIView):
    """This month's totals and one row per day of the last 7, 30 or 90 days."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[MemberTrafficQuery],
        responses=MemberTrafficSerializer,
        operation_id="member_traffic",
    )
    def get(self, request: Request, pk: int) -> Response:
        member = Member.objects.visible_to(request.user).filter(pk=pk).first()
        if member is None:
            raise Http404
        query = _query(MemberTrafficQuery, request)
        data = member_traffic(member=member, days=int(query.validated_data["days"]))
        data = {**data, "member": member, "time_zone": timezone.get_current_timezone_name()}
        return Response(MemberTrafficSerializer(data).data)


class TopQuery(serializers.Serializer):
    hour = MomentSerializerField(
        help_text="any time within the hour; without an offset, the portal's time zone"
    )
    site = serializers.PrimaryKeyRelatedField(queryset=Site.objects.all(), required=False)
    building = serializers.PrimaryKeyRelatedField(queryset=Building.objects.all(), required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, default=20, required=False)


class TalkerSerializer(serializers.Serializer):
    member = serializers.IntegerField(source="member_id")
    name = serializers.SerializerMethodField()
    room = serializers.CharField(source="member__room__label", allow_null=True)
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()

    def get_name(self, row: dict[str, Any]) -> str:
        full = f"{row['member__user__first_name']} {row['member__user__last_name']}".strip()
        return full or row["member__user__username"]


class TopSerializer(serializers.Serializer):
    span = serializers.ChoiceField(
        choices=Span.values, help_text="h: the hour asked for; d: its whole day (hours rolled up)"
    )
    start = serializers.DateTimeField()
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()
    members = serializers.IntegerField(help_text="members with traffic in this selection")
    rows = TalkerSerializer(many=True)


class TopTalkersAPI(APIView):
    """The members with the most traffic in one hour, per site and building (staff)."""

    permission_classes = [IsStaffRole]

    @extend_schema(parameters=[TopQuery], responses=TopSerializer, operation_id="traffic_top")
    def get(self, request: Request) -> Response:
        query = _query(TopQuery, request)
        data = query.validated_data
        hour: dt.datetime = data["hour"]
        if timezone.is_naive(hour):
            hour = timezone.make_aware(hour)
        result = top_talkers(
            hour=hour, site=data.get("site"), building=data.get("building"), limit=data["limit"]
        )
        return Response(TopSerializer(result).data)
