"""API: devices. A resident names a device and its MAC (the owner is the caller); staff name
the member too. Anything the caller may not see answers 404."""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.models import Member
from apps.members.selectors import member_of_user
from apps.network.errors import NetworkError
from apps.network.mac import mac_normalize
from apps.network.models import Device
from apps.network.services import device_add, device_change, device_remove


class DeviceFilter(django_filters.FilterSet):
    member = django_filters.NumberFilter(field_name="member_id")
    building = django_filters.CharFilter(
        field_name="member__room__building__code", lookup_expr="iexact"
    )
    mac = django_filters.CharFilter(method="filter_mac", help_text="Any common notation.")
    ipv4 = django_filters.CharFilter()
    ipv6 = django_filters.CharFilter()

    class Meta:
        model = Device
        fields = ["member", "building", "mac", "ipv4", "ipv6"]

    def filter_mac(self, queryset: QuerySet[Device], name: str, value: str) -> QuerySet[Device]:
        try:
            return queryset.filter(mac=mac_normalize(value))
        except DjangoValidationError as exc:
            raise ValidationError({"mac": exc.messages}) from None


class DeviceOutputSerializer(serializers.ModelSerializer):
    member = serializers.IntegerField(source="member_id")
    mac = serializers.CharField(help_text="Normalised: aa:bb:cc:dd:ee:ff.")

    class Meta:
        model = Device
        fields = ["id", "member", "name", "mac", "ipv4", "ipv6", "created_at", "updated_at"]


class DeviceCreateInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60)
    mac = serializers.CharField(max_length=40, help_text="Any common notation.")
    member = serializers.IntegerField(
        required=False, help_text="Staff only (required for staff); residents add their own."
    )


class DeviceChangeInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, required=False)
    mac = serializers.CharField(max_length=40, required=False)


def _devices(actor: Any) -> QuerySet[Device]:
    return Device.objects.visible_to(actor).select_related("member").order_by("pk")


def _refusal(exc: NetworkError) -> ValidationError:
    return ValidationError({exc.field or "non_field_errors": [exc.message]})


class DeviceListAPI(generics.ListAPIView):
    """Devices the caller may see (filter by member, building, MAC in any notation, address)."""

    serializer_class = DeviceOutputSerializer
    filterset_class = DeviceFilter

    def get_queryset(self) -> QuerySet[Device]:
        return _devices(self.request.user)

    @extend_schema(request=DeviceCreateInputSerializer, responses={201: DeviceOutputSerializer})
    def post(self, request: Request) -> Response:
        data = DeviceCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        member = self._member(request, data.validated_data.get("member"))
        try:
            device = device_add(
                member=member,
                name=data.validated_data["name"],
                mac=data.validated_data["mac"],
                actor=request.user,
            )
        except NetworkError as exc:
            raise _refusal(exc) from None
        return Response(DeviceOutputSerializer(device).data, status=status.HTTP_201_CREATED)

    def _member(self, request: Request, member_id: int | None) -> Member:
        if has_role(request.user, *STAFF_ROLES):
            if member_id is None:
                raise ValidationError({"member": ["Staff must name the member."]})
            member = Member.objects.visible_to(request.user).filter(pk=member_id).first()
            if member is None:
                raise ValidationError({"member": ["There is no such member."]})
            return member
        member = member_of_user(user=request.user)
        if member is None or (member_id is not None and member_id != member.pk):
            raise Http404
        return member


class DeviceDetailAPI(generics.RetrieveAPIView):
    """One device: read, rename / change MAC (PATCH), remove (DELETE)."""

    serializer_class = DeviceOutputSerializer

    def get_queryset(self) -> QuerySet[Device]:
        return _devices(self.request.user)

    @extend_schema(request=DeviceChangeInputSerializer, responses=DeviceOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        device = self.get_object()
        data = DeviceChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            device = device_change(device=device, actor=request.user, **data.validated_data)
        except NetworkError as exc:
            raise _refusal(exc) from None
        return Response(DeviceOutputSerializer(device).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        device_remove(device=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
