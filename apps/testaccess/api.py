"""API: test accesses (staff grant, extend and end them; a member sees their own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.utils.translation import gettext
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.api import refusal
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.network.errors import NetworkError
from apps.network.models import ShapingProfile
from apps.testaccess.services import (
    member_test_access_end,
    member_test_access_extend,
    member_test_access_grant,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class TestAccessOutputSerializer(serializers.Serializer):
    __test__ = False  # not a pytest class

    member = serializers.IntegerField(source="pk")
    status = serializers.ChoiceField(choices=MemberStatus.choices)
    until = serializers.DateField(source="test_access_until", help_text="The last day.")
    profile = serializers.IntegerField(
        source="test_access.profile_id", default=None, allow_null=True
    )
    profile_name = serializers.CharField(
        source="test_access.profile.name", default=None, allow_null=True
    )
    down_kbit = serializers.IntegerField(
        source="test_access.profile.down_kbit", default=None, allow_null=True
    )
    up_kbit = serializers.IntegerField(
        source="test_access.profile.up_kbit", default=None, allow_null=True
    )
    notice_sent = serializers.SerializerMethodField()

    def get_notice_sent(self, member: Member) -> bool:
        access = getattr(member, "test_access", None)
        return bool(access and access.notice_sent_for == member.test_access_until)


class TestAccessInputSerializer(serializers.Serializer):
    __test__ = False  # not a pytest class

    member = serializers.IntegerField(required=False, help_text="POST only.")
    until = serializers.DateField(help_text="The last day (after today).")
    profile = serializers.IntegerField(required=False, help_text="Default: the default profile.")


class TestAccessEndInputSerializer(serializers.Serializer):
    __test__ = False  # not a pytest class

    note = serializers.CharField(max_length=200, required=False, allow_blank=True)


def _test_accesses(actor: User) -> QuerySet[Member]:
    return (
        Member.objects.visible_to(actor)
        .filter(status=MemberStatus.TEST)
        .select_related("test_access__profile")
        .order_by("test_access_until", "pk")
    )


def _profile(profile_id: int | None) -> ShapingProfile | None:
    if profile_id is None:
        return None
    profile = ShapingProfile.objects.filter(pk=profile_id).first()
    if profile is None:
        raise ValidationError({"profile": [gettext("There is no such shaping profile.")]})
    return profile


class TestAccessListAPI(generics.ListAPIView):
    """Running test accesses (a member: their own), soonest end first; staff POST grants one."""

    __test__ = False  # not a pytest class
    serializer_class = TestAccessOutputSerializer

    def get_queryset(self) -> QuerySet[Member]:
        return _test_accesses(self.request.user)

    @extend_schema(request=TestAccessInputSerializer, responses={201: TestAccessOutputSerializer})
    def post(self, request: Request) -> Response:
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = TestAccessInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        member = Member.objects.visible_to(request.user).filter(pk=values.get("member")).first()
        if member is None:
            raise ValidationError({"member": [gettext("There is no such member.")]})
        try:
            member_test_access_grant(
                member=member,
                until=values["until"],
                profile=_profile(values.get("profile")),
                actor=request.user,
            )
        except NetworkError as exc:
            raise refusal(exc) from None
        member = _test_accesses(request.user).get(pk=member.pk)
        return Response(TestAccessOutputSerializer(member).data, status=status.HTTP_201_CREATED)


class TestAccessDetailAPI(generics.RetrieveAPIView):
    """One running test access by member id; staff extend it (PATCH) or end it (DELETE)."""

    __test__ = False  # not a pytest class
    serializer_class = TestAccessOutputSerializer

    def get_queryset(self) -> QuerySet[Member]:
        return _test_accesses(self.request.user)

    @extend_schema(request=TestAccessInputSerializer, responses=TestAccessOutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        member = self.get_object()
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = TestAccessInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            member_test_access_extend(
                member=member,
                until=data.validated_data["until"],
                profile=_profile(data.validated_data.get("profile")),
                actor=request.user,
            )
        except NetworkError as exc:
            raise refusal(exc) from None
        return Response(TestAccessOutputSerializer(self.get_object()).data)

    @extend_schema(request=TestAccessEndInputSerializer, responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        member = self.get_object()
        if not has_role(request.user, *STAFF_ROLES):
            raise PermissionDenied
        data = TestAccessEndInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            member_test_access_end(
                member=member, note=data.validated_data.get("note", ""), actor=request.user
            )
        except NetworkError as exc:
            raise refusal(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
