"""API: the abuse lookup. POST (the reason must not end up in URLs and access logs); the
answer is the page's, as data. Bad input answers 400 naming each field; nothing is recorded."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.abuse.choices import Verdict
from apps.abuse.inputs import REASON_MAX, LookupInvalid
from apps.abuse.services import abuse_lookup
from apps.accounts.roles import IsAbuseRole
from apps.accounts.throttle import AbuseLookupThrottle, TokenRateThrottle


class LookupInputSerializer(serializers.Serializer):
    address = serializers.CharField(max_length=100, help_text="One IPv4 or IPv6 address.")
    at = serializers.CharField(
        max_length=60,
        help_text="ISO 8601; without an offset it is read in the portal's time zone "
        "(`time_zone` in the answer).",
    )
    reason = serializers.CharField(
        max_length=REASON_MAX, help_text="Required; recorded in the audit trail with the lookup."
    )


class MemberRefSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()


class DeviceAtTimeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="device_ref", allow_null=True)
    name = serializers.CharField()
    mac = serializers.CharField(allow_null=True)
    ipv4 = serializers.CharField(allow_null=True)
    ipv6 = serializers.CharField(allow_null=True)
    exists = serializers.BooleanField(help_text="false: the device was removed since")


class EvidenceSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["holding", "room_stay", "lease"])
    id = serializers.IntegerField(source="ref")
    role = serializers.ChoiceField(choices=["answer", "device", "room", "lease", "before", "after"])
    what = serializers.CharField()
    start = serializers.DateTimeField(allow_null=True)
    end = serializers.DateTimeField(allow_null=True, help_text="not included; null: still held")
    source = serializers.CharField()


class LookupOutputSerializer(serializers.Serializer):
    lookup = serializers.IntegerField(source="lookup.pk", help_text="the audited lookup's id")
    address = serializers.CharField()
    at = serializers.DateTimeField()
    time_zone = serializers.CharField()
    verdict = serializers.ChoiceField(choices=Verdict.values)
    summary = serializers.CharField()
    member = serializers.SerializerMethodField()
    room = serializers.CharField(allow_blank=True)
    devices = DeviceAtTimeSerializer(many=True)
    evidence = EvidenceSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())

    @extend_schema_field(MemberRefSerializer(allow_null=True))
    def get_member(self, answer: Any) -> dict[str, Any] | None:
        if not answer.member_name:
            return None
        return {"id": answer.member.pk if answer.member else None, "name": answer.member_name}


class AbuseLookupAPI(APIView):
    """Who held an address at a point in time (abuse desk and admins); audited with the reason."""

    permission_classes = [IsAbuseRole]
    # Every request counts against the token (as everywhere); every lookup also against the
    # lookup limit, shared with the page (PORTAL_THROTTLE_ABUSE_LOOKUP).
    throttle_classes = [TokenRateThrottle, AbuseLookupThrottle]

    @extend_schema(request=LookupInputSerializer, responses={200: LookupOutputSerializer})
    def post(self, request: Request) -> Response:
        data = LookupInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            answer = abuse_lookup(actor=request.user, **data.validated_data)
        except LookupInvalid as exc:
            raise ValidationError(exc.errors) from None
        return Response(LookupOutputSerializer(answer).data)
