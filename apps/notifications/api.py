"""API: the caller's own notices and notification preferences. Notices are personal: nobody,
staff included, reads anyone else's (404, as if it did not exist)."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api import PageQuerySerializer, page_response, paginated, query_validate
from apps.members.models import Member
from apps.members.selectors import member_of_user
from apps.notifications.choices import NoticeKind
from apps.notifications.models import Notice
from apps.notifications.selectors import notice_get, notice_list, preference_of
from apps.notifications.services import preference_update


class NoticeOutputSerializer(serializers.ModelSerializer):
    title = serializers.CharField(help_text="In the language of the request.")
    body = serializers.CharField(help_text="In the language of the request.")

    class Meta:
        model = Notice
        fields = ["id", "kind", "title", "body", "params", "created_at", "mail_status", "mailed_at"]


class NoticeListAPI(APIView):
    """The caller's notices, newest first."""

    @extend_schema(
        parameters=[PageQuerySerializer],
        responses=paginated(NoticeOutputSerializer(many=True), "PaginatedNoticeList"),
        operation_id="notices_list",
    )
    def get(self, request: Request) -> Response:
        query_validate(request, PageQuerySerializer)
        return page_response(request, notice_list(actor=request.user), NoticeOutputSerializer, self)


class NoticeDetailAPI(APIView):
    """One of the caller's notices."""

    @extend_schema(responses=NoticeOutputSerializer)
    def get(self, request: Request, pk: int) -> Response:
        return Response(NoticeOutputSerializer(notice_get(actor=request.user, pk=pk)).data)


class PreferenceAPI(APIView):
    """The caller's language for notices and, per kind, whether it also comes by mail."""

    class Serializer(serializers.Serializer):
        language = serializers.ChoiceField(
            choices=["", *[code for code, _name in settings.LANGUAGES]],
            allow_blank=True,
            help_text='"" = not chosen: mails are written in every language of the portal.',
        )
        mail = serializers.DictField(
            child=serializers.BooleanField(),
            help_text=f"Per kind ({', '.join(NoticeKind.values)}): mail on or off. A notice "
            "on the member's page is always made.",
        )

        class Meta:
            ref_name = "NoticePreference"

        def validate_mail(self, value: dict[str, bool]) -> dict[str, bool]:
            unknown = sorted(set(value) - set(NoticeKind.values))
            if unknown:
                raise serializers.ValidationError(f"Unknown kind(s): {', '.join(unknown)}.")
            return value

    def _member(self, request: Request) -> Member:
        member = member_of_user(user=request.user)
        if member is None:
            raise Http404
        return member

    def _data(self, member: Member) -> dict[str, object]:
        preference = preference_of(member=member)
        return {
            "language": preference.language,
            "mail": {kind: preference.wants_mail(kind) for kind in NoticeKind.values},
        }

    @extend_schema(responses=Serializer)
    def get(self, request: Request) -> Response:
        return Response(self._data(self._member(request)))

    @extend_schema(request=Serializer, responses=Serializer)
    def put(self, request: Request) -> Response:
        member = self._member(request)
        data = self.Serializer(data=request.data)
        data.is_valid(raise_exception=True)
        preference_update(
            member=member,
            language=data.validated_data["language"],
            mail=data.validated_data["mail"],
            actor=request.user,
        )
        return Response(self._data(member))
