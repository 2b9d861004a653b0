"""API: members (staff: all; a member: only their own record) and rooms."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.members.choices import MemberStatus
from apps.members.models import Member, Room
from apps.members.privacy import member_data_export
from apps.network.models import Device


class MemberFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=MemberStatus.choices)
    building = django_filters.CharFilter(field_name="room__building__code", lookup_expr="iexact")
    room = django_filters.CharFilter(field_name="room__label", lookup_expr="iexact")
    email = django_filters.CharFilter(field_name="user__email", lookup_expr="iexact")

    class Meta:
        model = Member
        fields = ["status", "building", "room", "email"]


class MemberDeviceOutputSerializer(serializers.ModelSerializer):
    mac = serializers.CharField()

    class Meta:
        model = Device
        fields = ["id", "name", "mac", "ipv4", "ipv6"]


class MemberOutputSerializer(serializers.ModelSerializer):
    """A member with contact data and every address: public IPv4, devices' IPv4 and IPv6."""

    username = serializers.CharField(source="user.username")
    first_name = serializers.CharField(source="user.first_name")
    last_name = serializers.CharField(source="user.last_name")
    email = serializers.EmailField(source="user.email")
    room = serializers.CharField(source="room.label", allow_null=True, default=None)
    building = serializers.CharField(source="room.building.code", allow_null=True, default=None)
    room_ipv6_prefix = serializers.CharField(
        source="room.ipv6_prefix", allow_null=True, default=None
    )
    public_ipv4 = serializers.SerializerMethodField()
    devices = MemberDeviceOutputSerializer(many=True)

    class Meta:
        model = Member
        fields = [
            "id",
            "username",
            "first_name",
            "last_name",
            "email",
            "phone",
            "status",
            "status_since",
            "test_access_until",
            "room",
            "building",
            "room_ipv6_prefix",
            "public_ipv4",
            "devices",
        ]

    def get_public_ipv4(self, member: Member) -> str | None:
        address = getattr(member, "public_ipv4", None)
        return address.address if address else None


def _members(actor: Any) -> QuerySet[Member]:
    return (
        Member.objects.visible_to(actor)
        .select_related("user", "room__building", "public_ipv4")
        .prefetch_related(Prefetch("devices", queryset=Device.objects.order_by("name", "pk")))
        .order_by("pk")
    )


class MemberListAPI(generics.ListAPIView):
    """Members: staff see all (filter by status, building, room, e-mail); a member sees self."""

    serializer_class = MemberOutputSerializer
    filterset_class = MemberFilter

    def get_queryset(self) -> QuerySet[Member]:
        return _members(self.request.user)


class MemberDetailAPI(generics.RetrieveAPIView):
    """One member; 404 for anyone who may not see it."""

    serializer_class = MemberOutputSerializer

    def get_queryset(self) -> QuerySet[Member]:
        return _members(self.request.user)


class MemberDataAPI(APIView):
    """A member's own personal data (the download of their page); nobody else's, staff
    included: 404 for any other member."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, pk: int | None = None) -> Response:
        own = Member.objects.filter(user=request.user)
        member = (own.filter(pk=pk) if pk is not None else own).select_related("user").first()
        if member is None:
            raise Http404
        return Response(member_data_export(member=member, actor=request.user))


class RoomFilter(django_filters.FilterSet):
    building = django_filters.CharFilter(field_name="building__code", lookup_expr="iexact")
    label = django_filters.CharFilter(lookup_expr="iexact")

    class Meta:
        model = Room
        fields = ["building", "number", "label"]


class RoomOutputSerializer(serializers.ModelSerializer):
    building = serializers.CharField(source="building.code")
    building_name = serializers.CharField(source="building.name")
    ipv6_prefix = serializers.CharField(allow_null=True)

    class Meta:
        model = Room
        fields = ["id", "label", "building", "building_name", "number", "ipv6_prefix"]


def _rooms(actor: Any) -> QuerySet[Room]:
    return Room.objects.visible_to(actor).select_related("building").order_by("label")


class RoomListAPI(generics.ListAPIView):
    """Rooms: staff see all; a member sees the room they live in."""

    serializer_class = RoomOutputSerializer
    filterset_class = RoomFilter

    def get_queryset(self) -> QuerySet[Room]:
        return _rooms(self.request.user)


class RoomDetailAPI(generics.RetrieveAPIView):
    serializer_class = RoomOutputSerializer

    def get_queryset(self) -> QuerySet[Room]:
        return _rooms(self.request.user)
