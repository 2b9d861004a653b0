"""API: members (staff: all; a member: only their own record) and rooms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django_filters
from django import forms
from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.errors import NetworkError
from apps.members import forms as member_forms
from apps.members import services
from apps.members.choices import MemberStatus
from apps.members.errors import MemberStateError
from apps.members.models import Member, Room
from apps.members.privacy import member_data_export

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class MemberFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=MemberStatus.choices)
    building = django_filters.CharFilter(field_name="room__building__code", lookup_expr="iexact")
    room = django_filters.CharFilter(field_name="room__label", lookup_expr="iexact")
    email = django_filters.CharFilter(field_name="user__email", lookup_expr="iexact")

    class Meta:
        model = Member
        fields = ["status", "building", "room", "email"]


# A member's devices belong to the network app: members reaches their model through the
# relation network adds to Member, `member.devices`, and never imports network.
Device = Member.devices.rel.related_model


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


def _members(actor: User) -> QuerySet[Member]:
    return (
        Member.objects.visible_to(actor)
        .select_related("user", "room__building", "public_ipv4")
        .prefetch_related(Prefetch("devices", queryset=Device.objects.order_by("name", "pk")))
        .order_by("pk")
    )


class RegisterInput(serializers.Serializer):
    first_name = serializers.CharField(max_length=150)
    last_name = serializers.CharField(max_length=150)
    email = serializers.EmailField()
    phone = serializers.CharField(max_length=40, required=False, allow_blank=True)
    room = serializers.CharField(max_length=40, help_text="Building code and number, e.g. A-101.")


class ContactInput(serializers.Serializer):
    email = serializers.EmailField()
    phone = serializers.CharField(max_length=40, required=False, allow_blank=True)


class MemberListAPI(generics.ListAPIView):
    """Members: staff see all (filter by status, building, room, e-mail); a member sees self.
    Staff POST registers a new member at the desk (pending until checked in)."""

    serializer_class = MemberOutputSerializer
    filterset_class = MemberFilter

    def get_queryset(self) -> QuerySet[Member]:
        return _members(self.request.user)

    @extend_schema(request=RegisterInput, responses={201: MemberOutputSerializer})
    def post(self, request: Request) -> Response:
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = form_validate(member_forms.RegisterForm, request.data)
        try:
            member = services.member_register(actor=request.user, **data)
        except NetworkError as exc:
            raise refusal(exc) from None
        member = _members(request.user).get(pk=member.pk)
        return Response(MemberOutputSerializer(member).data, status=status.HTTP_201_CREATED)


class MemberDetailAPI(generics.RetrieveAPIView):
    """One member; 404 for anyone who may not see it. Staff PATCH the contact data."""

    serializer_class = MemberOutputSerializer

    def get_queryset(self) -> QuerySet[Member]:
        return _members(self.request.user)

    @extend_schema(request=ContactInput, responses=MemberOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        member = self.get_object()
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = form_validate(member_forms.ContactForm, request.data)
        try:
            services.member_update_contact(
                member=member, email=data["email"], phone=data["phone"], actor=request.user
            )
        except NetworkError as exc:
            raise refusal(exc) from None
        return Response(MemberOutputSerializer(self.get_queryset().get(pk=pk)).data)


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


def _rooms(actor: User | None) -> QuerySet[Room]:
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


# --- office-hours actions (staff; the same services, forms and audit as the member page) -------


def form_validate(form_class: type[forms.Form], data: Any) -> dict[str, Any]:
    """Validate `data` with the page's own form: the API refuses exactly what the page refuses,
    with the same messages, as 400 {field: [messages]}."""
    form = form_class(data=data if hasattr(data, "get") else {})
    if not form.is_valid():
        raise ValidationError(
            {
                ("non_field_errors" if field == "__all__" else field): list(errors)
                for field, errors in form.errors.items()
            }
        )
    return form.cleaned_data


def refusal(exc: NetworkError) -> ValidationError:
    """A service's typed refusal as 400 with the field it concerns."""
    return ValidationError({exc.field or "non_field_errors": [exc.message]})


class _MemberActionAPI(APIView):
    """POST one office-hours action on a member: 404 unless the caller may see the member, 403
    unless staff (as the member page), 400 with field messages when refused (nothing changed)."""

    form_class: type[forms.Form]
    schema_input: type[serializers.Serializer]

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, pk: int) -> Response:
        member = generics.get_object_or_404(_members(request.user), pk=pk)
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = form_validate(self.form_class, request.data)
        try:
            self.run(member, request.user, data)
        except NetworkError as exc:
            raise refusal(exc) from None
        return Response(MemberOutputSerializer(_members(request.user).get(pk=pk)).data)


def _action_schema(view: type[_MemberActionAPI], summary: str) -> type[_MemberActionAPI]:
    return extend_schema(
        request=view.schema_input,
        responses={200: MemberOutputSerializer},
        summary=summary,
    )(view)


class CheckInInput(serializers.Serializer):
    identity_checked = serializers.BooleanField(
        help_text="Must be true: the volunteer has seen a photo ID that matches."
    )


class SuspendInput(serializers.Serializer):
    reason = serializers.CharField(max_length=200)


class MoveInput(serializers.Serializer):
    room = serializers.CharField(max_length=40, help_text="Building code and number, e.g. A-101.")


class EndInput(serializers.Serializer):
    note = serializers.CharField(max_length=200, required=False, allow_blank=True)
    confirm = serializers.BooleanField(help_text="Must be true: ending cannot be undone.")


class MemberCheckInAPI(_MemberActionAPI):
    """Check in a pending, test or suspended member: active, with a public IPv4."""

    form_class, schema_input = member_forms.CheckInForm, CheckInInput

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        services.member_check_in(member=member, actor=actor)


class MemberUnsuspendAPI(_MemberActionAPI):
    """Lift a suspension: the check-in of a suspended member (refused for any other status)."""

    form_class, schema_input = member_forms.CheckInForm, CheckInInput

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        if member.status != MemberStatus.SUSPENDED:
            raise MemberStateError(_("%(member)s is not suspended.") % {"member": member})
        services.member_check_in(member=member, actor=actor)


class MemberSuspendAPI(_MemberActionAPI):
    """Suspend an active or test membership, with the reason."""

    form_class, schema_input = member_forms.SuspendForm, SuspendInput

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        services.member_suspend(member=member, reason=data["reason"], actor=actor)


class MemberMoveAPI(_MemberActionAPI):
    """Move to another room: new private addresses, the same public IPv4."""

    form_class, schema_input = member_forms.MoveForm, MoveInput

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        services.member_move(member=member, room=data["room"], actor=actor)


class MemberEndAPI(_MemberActionAPI):
    """End the membership: the public IPv4 to quarantine, devices removed."""

    form_class, schema_input = member_forms.EndForm, EndInput

    def run(self, member: Member, actor: User, data: dict[str, Any]) -> None:
        services.member_end(member=member, note=data["note"], actor=actor)


for _view, _summary in (
    (MemberCheckInAPI, "Check in"),
    (MemberUnsuspendAPI, "Unsuspend"),
    (MemberSuspendAPI, "Suspend"),
    (MemberMoveAPI, "Move to another room"),
    (MemberEndAPI, "End the membership"),
):
    _action_schema(_view, _summary)
