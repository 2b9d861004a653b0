"""API: devices, port forwards, IPv6 openings, test accesses. A resident works on their own
objects; staff on anyone's. Anything the caller may not see answers 404; a refused or invalid
request answers 400 with the field it concerns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from django.utils.translation import gettext
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.mac import mac_normalize
from apps.members.choices import NETWORKED_STATUSES
from apps.members.models import Member
from apps.members.selectors import member_of_user
from apps.network.choices import LiveStatus, Protocol
from apps.network.errors import NetworkError
from apps.network.extensions import live_attach
from apps.network.models import Device, Ipv6Opening, PortForward
from apps.network.ports import PortRange, PortRangeError
from apps.network.probe import ProbeRefused, forward_probe, opening_probe
from apps.network.services import (
    device_add,
    device_change,
    device_remove,
    ipv6_opening_change,
    ipv6_opening_create,
    ipv6_opening_delete,
    port_forward_change,
    port_forward_create,
    port_forward_delete,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class IPAddressFilter(django_filters.Filter):
    """An exact address of one family; anything else is refused (400), never sent to
    PostgreSQL's inet parser (which answered `x` with a 500)."""

    field_class = forms.GenericIPAddressField


class DeviceFilter(django_filters.FilterSet):
    member = django_filters.NumberFilter(field_name="member_id")
    building = django_filters.CharFilter(
        field_name="member__room__building__code", lookup_expr="iexact"
    )
    mac = django_filters.CharFilter(method="filter_mac", help_text="Any common notation.")
    ipv4 = IPAddressFilter(protocol="IPv4", help_text="An IPv4 address, e.g. 10.100.1.20.")
    ipv6 = IPAddressFilter(protocol="IPv6", help_text="An IPv6 address, e.g. 2001:db8:100::20.")

    class Meta:
        model = Device
        fields = ["member", "building", "mac", "ipv4", "ipv6"]

    def filter_mac(self, queryset: QuerySet[Device], name: str, value: str) -> QuerySet[Device]:
        try:
            return queryset.filter(mac=mac_normalize(value))
        except DjangoValidationError as exc:
            raise ValidationError({"mac": exc.messages}) from None


def reaches_firewalls(obj: Any) -> bool:
    """Forwards and openings while enabled; devices while their member is networked."""
    if isinstance(obj, Device):
        return obj.member.status in NETWORKED_STATUSES
    return bool(obj.enabled)


class LiveHostSerializer(serializers.Serializer):
    host = serializers.CharField()
    state = serializers.ChoiceField(
        choices=[LiveStatus.LIVE, LiveStatus.PENDING, LiveStatus.FAILED]
    )
    since = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField()


class LiveStateSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=LiveStatus.values)
    hosts = LiveHostSerializer(many=True)
    since = serializers.DateTimeField(allow_null=True, help_text="live on every host since")
    reason = serializers.CharField(
        help_text="why a host failed, if one did; why the row is not in force (state off)"
    )


@extend_schema_field(LiveStateSerializer(allow_null=True))
class LiveStateField(serializers.Field):
    """Whether the firewalls enforce the row: pending / live (on which hosts, since) / failed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["source"] = "*"
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, obj: Any) -> dict[str, Any] | None:
        if not reaches_firewalls(obj):
            return None
        if getattr(obj, "live", None) is None:
            live_attach([obj])
        live = obj.live
        return {
            "state": live["state"],
            "hosts": [
                {**h, "since": h["since"].isoformat() if h["since"] else None}
                for h in live["per_host"]
            ],
            "since": live["since"].isoformat() if live["since"] else None,
            "reason": live["reason"],
        }


class LiveStateListMixin:
    """List endpoints: attach the live state of a whole page in two queries."""

    def paginate_queryset(self, queryset: Any) -> Any:
        page = super().paginate_queryset(queryset)  # type: ignore[misc]
        if page is not None:
            live_attach([row for row in page if reaches_firewalls(row)])
        return page


class DeviceOutputSerializer(serializers.ModelSerializer):
    member = serializers.IntegerField(source="member_id")
    mac = serializers.CharField(help_text="Normalised: aa:bb:cc:dd:ee:ff.")
    live = LiveStateField(help_text="null while the member is not networked")

    class Meta:
        model = Device
        fields = [
            "id",
            "member",
            "name",
            "mac",
            "ipv4",
            "ipv6",
            "created_at",
            "updated_at",
            "live",
        ]


class DeviceCreateInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60)
    mac = serializers.CharField(max_length=40, help_text="Any common notation.")
    member = serializers.IntegerField(
        required=False, help_text="Staff only (required for staff); residents add their own."
    )


class DeviceChangeInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, required=False)
    mac = serializers.CharField(max_length=40, required=False)


def _devices(actor: User) -> QuerySet[Device]:
    return Device.objects.visible_to(actor).select_related("member").order_by("pk")


def _refusal(exc: NetworkError) -> ValidationError:
    return ValidationError({exc.field or "non_field_errors": [exc.message]})


class DeviceListAPI(LiveStateListMixin, generics.ListAPIView):
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


# --- port forwards, IPv6 openings, test accesses ---------------------------------------------


class PortRangeSerializerField(serializers.CharField):
    """`8080` or `8000-8010` in, a PortRange out; null or "" -> None where allowed."""

    def run_validation(self, data: Any = serializers.empty) -> PortRange | None:
        # CharField answers "" itself, before to_internal_value: here "" means "none" (None).
        if isinstance(data, str) and not data.strip():
            if not self.allow_blank:
                self.fail("blank")
            return None
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> PortRange | None:  # type: ignore[override]
        text = super().to_internal_value(data)
        if not text:
            return None
        if len(text) > 20:
            raise serializers.ValidationError(
                gettext("Write a port such as 8080 or a range such as 8000-8010.")
            )
        try:
            return PortRange.parse(text)
        except PortRangeError as exc:
            raise serializers.ValidationError(str(exc)) from None


def _own_device(request: Request, device_id: int) -> Device:
    device = Device.objects.visible_to(request.user).select_related("member").filter(pk=device_id)
    found = device.first()
    if found is None:
        raise ValidationError({"device": [gettext("Choose one of your own devices.")]})
    return found


class PortForwardOutputSerializer(serializers.ModelSerializer):
    member = serializers.IntegerField(source="member_id")
    device = serializers.IntegerField(source="device_id", allow_null=True)
    device_name = serializers.CharField(source="device.name", default=None, allow_null=True)
    public_address = serializers.CharField(
        source="public_address.address",
        default=None,
        allow_null=True,
        help_text="The member's public IPv4; null once released (the forward is disabled).",
    )
    public_ports = serializers.CharField(help_text="8080 or 8000-8010.")
    target_ports = serializers.CharField(help_text="Ports on the device, as many as public.")
    live = LiveStateField(help_text="null while disabled")

    class Meta:
        model = PortForward
        fields = [
            "id",
            "member",
            "device",
            "device_name",
            "protocol",
            "public_address",
            "public_ports",
            "public_first",
            "public_last",
            "target_ports",
            "target_first",
            "target_last",
            "enabled",
            "description",
            "created_at",
            "updated_at",
            "live",
        ]


class PortForwardCreateInputSerializer(serializers.Serializer):
    device = serializers.IntegerField(help_text="One of the member's own devices.")
    protocol = serializers.ChoiceField(choices=Protocol.choices)
    public_ports = PortRangeSerializerField(help_text="8080 or 8000-8010.")
    target_ports = PortRangeSerializerField(
        required=False, allow_blank=True, allow_null=True, help_text="Default: the public ports."
    )
    description = serializers.CharField(max_length=100, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False, default=True)


class PortForwardChangeInputSerializer(serializers.Serializer):
    device = serializers.IntegerField(required=False)
    protocol = serializers.ChoiceField(choices=Protocol.choices, required=False)
    public_ports = PortRangeSerializerField(required=False)
    target_ports = PortRangeSerializerField(required=False)
    description = serializers.CharField(max_length=100, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class PortForwardFilter(django_filters.FilterSet):
    member = django_filters.NumberFilter(field_name="member_id")
    device = django_filters.NumberFilter(field_name="device_id")
    enabled = django_filters.BooleanFilter()
    protocol = django_filters.ChoiceFilter(choices=Protocol.choices)

    class Meta:
        model = PortForward
        fields = ["member", "device", "enabled", "protocol"]


def _forwards(actor: User) -> QuerySet[PortForward]:
    return (
        PortForward.objects.visible_to(actor)
        .select_related("device", "public_address")
        .order_by("pk")
    )


class PortForwardListAPI(LiveStateListMixin, generics.ListAPIView):
    """Port forwards the caller may see; POST adds one (to the device's member)."""

    serializer_class = PortForwardOutputSerializer
    filterset_class = PortForwardFilter

    def get_queryset(self) -> QuerySet[PortForward]:
        return _forwards(self.request.user)

    @extend_schema(
        request=PortForwardCreateInputSerializer, responses={201: PortForwardOutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = PortForwardCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        device = _own_device(request, values["device"])
        try:
            forward = port_forward_create(
                member=device.member,
                device=device,
                protocol=values["protocol"],
                public_ports=values["public_ports"],
                target_ports=values.get("target_ports"),
                description=values.get("description", ""),
                enabled=values.get("enabled", True),
                actor=request.user,
            )
        except NetworkError as exc:
            raise _refusal(exc) from None
        forward = _forwards(request.user).get(pk=forward.pk)
        return Response(PortForwardOutputSerializer(forward).data, status=status.HTTP_201_CREATED)


class PortForwardDetailAPI(generics.RetrieveAPIView):
    """One forward: read, change / enable / disable (PATCH), delete (DELETE)."""

    serializer_class = PortForwardOutputSerializer

    def get_queryset(self) -> QuerySet[PortForward]:
        return _forwards(self.request.user)

    @extend_schema(request=PortForwardChangeInputSerializer, responses=PortForwardOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        forward = self.get_object()
        data = PortForwardChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if "device" in values:
            values["device"] = _own_device(request, values["device"])
        try:
            port_forward_change(forward=forward, actor=request.user, **values)
        except NetworkError as exc:
            raise _refusal(exc) from None
        return Response(PortForwardOutputSerializer(self.get_object()).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        port_forward_delete(forward=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class Ipv6OpeningOutputSerializer(serializers.ModelSerializer):
    member = serializers.IntegerField(source="device.member_id")
    device = serializers.IntegerField(source="device_id")
    device_name = serializers.CharField(source="device.name")
    ports = serializers.CharField(help_text='8080 or 8000-8010; "" means all ports.')
    all_ports = serializers.BooleanField()
    live = LiveStateField(help_text="null while disabled")

    class Meta:
        model = Ipv6Opening
        fields = [
            "id",
            "member",
            "device",
            "device_name",
            "protocol",
            "all_ports",
            "ports",
            "port_first",
            "port_last",
            "enabled",
            "description",
            "created_at",
            "updated_at",
            "live",
        ]


class Ipv6OpeningCreateInputSerializer(serializers.Serializer):
    device = serializers.IntegerField(help_text="One of the member's own devices.")
    protocol = serializers.ChoiceField(choices=Protocol.choices)
    ports = PortRangeSerializerField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="8080 or 8000-8010; empty or null: all ports (protocol both).",
    )
    description = serializers.CharField(max_length=100, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False, default=True)


class Ipv6OpeningChangeInputSerializer(serializers.Serializer):
    protocol = serializers.ChoiceField(choices=Protocol.choices, required=False)
    ports = PortRangeSerializerField(required=False, allow_blank=True, allow_null=True)
    description = serializers.CharField(max_length=100, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class Ipv6OpeningFilter(django_filters.FilterSet):
    member = django_filters.NumberFilter(field_name="device__member_id")
    device = django_filters.NumberFilter(field_name="device_id")
    enabled = django_filters.BooleanFilter()

    class Meta:
        model = Ipv6Opening
        fields = ["member", "device", "enabled"]


def _openings(actor: User) -> QuerySet[Ipv6Opening]:
    return Ipv6Opening.objects.visible_to(actor).select_related("device").order_by("pk")


class Ipv6OpeningListAPI(LiveStateListMixin, generics.ListAPIView):
    """IPv6 openings the caller may see; POST opens ports (or all ports) of a device."""

    serializer_class = Ipv6OpeningOutputSerializer
    filterset_class = Ipv6OpeningFilter

    def get_queryset(self) -> QuerySet[Ipv6Opening]:
        return _openings(self.request.user)

    @extend_schema(
        request=Ipv6OpeningCreateInputSerializer, responses={201: Ipv6OpeningOutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = Ipv6OpeningCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        device = _own_device(request, values["device"])
        try:
            opening = ipv6_opening_create(
                device=device,
                protocol=values["protocol"],
                ports=values.get("ports"),
                description=values.get("description", ""),
                enabled=values.get("enabled", True),
                actor=request.user,
            )
        except NetworkError as exc:
            raise _refusal(exc) from None
        opening = _openings(request.user).get(pk=opening.pk)
        return Response(Ipv6OpeningOutputSerializer(opening).data, status=status.HTTP_201_CREATED)


class Ipv6OpeningDetailAPI(generics.RetrieveAPIView):
    """One opening: read, change / enable / disable (PATCH), close (DELETE)."""

    serializer_class = Ipv6OpeningOutputSerializer

    def get_queryset(self) -> QuerySet[Ipv6Opening]:
        return _openings(self.request.user)

    @extend_schema(request=Ipv6OpeningChangeInputSerializer, responses=Ipv6OpeningOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        opening = self.get_object()
        data = Ipv6OpeningChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            ipv6_opening_change(opening=opening, actor=request.user, **data.validated_data)
        except NetworkError as exc:
            raise _refusal(exc) from None
        return Response(Ipv6OpeningOutputSerializer(self.get_object()).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        ipv6_opening_delete(opening=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- test from outside (the Test button of a forward or an opening) ---------------------------


class ProbeResultSerializer(serializers.Serializer):
    protocol = serializers.CharField(help_text="tcp or udp")
    address = serializers.CharField()
    port = serializers.IntegerField()
    result = serializers.ChoiceField(
        choices=["reachable", "refused", "no-answer", "open-or-filtered"]
    )
    rtt_ms = serializers.FloatField(allow_null=True)
    cached = serializers.BooleanField(help_text="An answer from the last minute, reused.")
    label = serializers.CharField(help_text="The result in words, in the request's language.")


def _probe_response(run: Any) -> Response:
    try:
        results = run()
    except ProbeRefused as exc:
        raise ValidationError({"non_field_errors": [str(exc)]}) from None
    return Response(ProbeResultSerializer(results, many=True).data)


class PortForwardProbeAPI(generics.GenericAPIView):
    """Test the forward from outside (its first public port, per protocol); 400 says why a test
    cannot run (no probe host, hourly limit, forward disabled)."""

    serializer_class = ProbeResultSerializer

    def get_queryset(self) -> QuerySet[PortForward]:
        return _forwards(self.request.user)

    @extend_schema(request=None, responses=ProbeResultSerializer(many=True))
    def post(self, request: Request, pk: int) -> Response:
        forward = self.get_object()

        return _probe_response(lambda: forward_probe(actor=request.user, forward=forward))


class Ipv6OpeningProbeAPI(generics.GenericAPIView):
    """Test the opening from outside (its first port, per protocol); 400 says why not."""

    serializer_class = ProbeResultSerializer

    def get_queryset(self) -> QuerySet[Ipv6Opening]:
        return _openings(self.request.user)

    @extend_schema(request=None, responses=ProbeResultSerializer(many=True))
    def post(self, request: Request, pk: int) -> Response:
        opening = self.get_object()
        return _probe_response(lambda: opening_probe(actor=request.user, opening=opening))
