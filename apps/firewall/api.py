"""API: the firewall hosts and the admins' actions on them (push now, put a version back and
hold it, unpin, conntrack resync): the same services, role checks and audit rows as the pages."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import IsAdminRole, IsStaffRole
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.pipeline import push_request_outcome
from apps.firewall.services import (
    PinRefused,
    firewall_push_now,
    host_pin,
    host_state_resync,
    host_unpin,
)


class FirewallHostOutputSerializer(serializers.ModelSerializer):
    site = serializers.CharField(source="site.name")
    applied_version = serializers.IntegerField(source="applied_version_id", allow_null=True)
    pinned_version = serializers.IntegerField(source="pinned_version_id", allow_null=True)

    class Meta:
        model = FirewallHost
        fields = [
            "id",
            "name",
            "site",
            "enabled",
            "push_status",
            "error_reason",
            "applied_version",
            "pinned_version",
            "pinned_at",
        ]


class VersionOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = RuleSetVersion
        fields = ["id", "content_hash", "counts", "size_bytes", "cause", "created_at"]


def _host(name: str) -> FirewallHost:
    return get_object_or_404(FirewallHost.objects.select_related("site"), name=name)


class FirewallHostListAPI(generics.ListAPIView):
    """Firewall hosts with their push state (staff)."""

    permission_classes = [IsStaffRole]
    serializer_class = FirewallHostOutputSerializer

    def get_queryset(self) -> QuerySet[FirewallHost]:
        return FirewallHost.objects.select_related("site").order_by("site__name", "name")


class FirewallVersionListAPI(generics.ListAPIView):
    """A host's stored rule-set versions, newest first (staff): what rollback can put back."""

    permission_classes = [IsStaffRole]
    serializer_class = VersionOutputSerializer

    def get_queryset(self) -> QuerySet[RuleSetVersion]:
        if getattr(self, "swagger_fake_view", False):
            return RuleSetVersion.objects.none()
        host = _host(self.kwargs["name"])
        return host.versions.defer("nft_text", "tc_text", "files", "snapshot_json").order_by(
            "-created_at", "-pk"
        )


PushRequestOutput = inline_serializer("PushRequestOutput", {"request_id": serializers.CharField()})


class PushNowAPI(APIView):
    """Admins: compile and roll out every site now (audited per host); 202 with the request id
    whose outcome GET /api/firewalls/push-now/{request_id}/ reports."""

    permission_classes = [IsAdminRole]

    @extend_schema(request=None, responses={202: PushRequestOutput})
    def post(self, request: Request) -> Response:
        return Response(
            {"request_id": firewall_push_now(actor=request.user)}, status=status.HTTP_202_ACCEPTED
        )


class PushOutcomeAPI(APIView):
    """Admins: the outcome of one push now, per site (404 once it is forgotten)."""

    permission_classes = [IsAdminRole]

    @extend_schema(
        responses=inline_serializer(
            "PushOutcomeOutput",
            {"request_id": serializers.CharField(), "outcome": serializers.DictField()},
        )
    )
    def get(self, request: Request, request_id: str) -> Response:
        outcome = push_request_outcome(request_id)
        if outcome is None:
            raise Http404
        return Response({"request_id": request_id, "outcome": outcome})


class RollbackInput(serializers.Serializer):
    version = serializers.IntegerField(help_text="A stored version of this host.")


class RollbackAPI(APIView):
    """Admins: put a stored version back on the host and hold it there (audited)."""

    permission_classes = [IsAdminRole]

    @extend_schema(request=RollbackInput, responses={202: FirewallHostOutputSerializer})
    def post(self, request: Request, name: str) -> Response:
        host = _host(name)
        data = RollbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        version = host.versions.defer("nft_text", "tc_text").filter(
            pk=data.validated_data["version"]
        )
        found = version.first()
        if found is None:
            raise ValidationError({"version": [_("There is no such version of this host.")]})
        try:
            host_pin(host=host, version=found, actor=request.user)
        except PinRefused as exc:  # a version applied as an increment, not stored yet
            raise ValidationError({"version": [str(exc)]}) from None
        return Response(
            FirewallHostOutputSerializer(_host(name)).data, status=status.HTTP_202_ACCEPTED
        )


class UnpinAPI(APIView):
    """Admins: release a pinned host; its site pushes the newest version (audited)."""

    permission_classes = [IsAdminRole]

    @extend_schema(request=None, responses={202: FirewallHostOutputSerializer})
    def post(self, request: Request, name: str) -> Response:
        host_unpin(host=_host(name), actor=request.user)
        return Response(
            FirewallHostOutputSerializer(_host(name)).data, status=status.HTTP_202_ACCEPTED
        )


class StateResyncAPI(APIView):
    """Admins: the host asks its peer's conntrackd for every connection state again."""

    permission_classes = [IsAdminRole]

    @extend_schema(
        request=None,
        responses={200: inline_serializer("ResyncOutput", {"ok": serializers.BooleanField()})},
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            host_state_resync(host=_host(name), actor=request.user)
        except ValueError as exc:
            raise ValidationError({"non_field_errors": [str(exc)]}) from None
        return Response({"ok": True})
