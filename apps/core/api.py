"""What every API endpoint shares: query parameters that are checked, not ignored, and the
paginated envelope said in the schema."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

# Parameters every endpoint understands: DRF's page number and its ?format= override.
PAGING = frozenset({"page", "format"})


def unknown_parameters_refuse(request: Request, known: set[str] | frozenset[str]) -> None:
    """400 naming each query parameter the endpoint does not understand (a typo such as
    ?stauts=open would otherwise list everything)."""
    unknown = sorted(set(request.query_params) - set(known) - PAGING)
    if unknown:
        raise ValidationError(
            {
                name: [_("Unknown parameter; this endpoint does not filter by it.")]
                for name in unknown
            }
        )


def query_validate(
    request: Request, serializer_class: type[serializers.Serializer]
) -> dict[str, Any]:
    """The query parameters checked by `serializer_class`: unknown or invalid ones answer 400."""
    serializer = serializer_class(data=request.query_params)
    unknown_parameters_refuse(request, set(serializer.fields))
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, refusing parameters the filter set does not define (it ignores them)."""

    def filter_queryset(self, request: Request, queryset: Any, view: Any) -> Any:
        filterset_class = self.get_filterset_class(view, queryset)
        known = set(filterset_class.base_filters) if filterset_class is not None else set()
        unknown_parameters_refuse(request, known)
        return super().filter_queryset(request, queryset, view)


class PageQuerySerializer(serializers.Serializer):
    page = serializers.IntegerField(required=False, min_value=1)


def page_response(
    request: Request, rows: Any, serializer_class: type[serializers.Serializer], view: Any
) -> Response:
    """One page of `rows` (?page=) in the envelope `paginated()` documents."""
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(rows, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def paginated(serializer: serializers.Serializer, name: str) -> serializers.Serializer:
    """The schema of one page of `serializer` (many=True): count, next, previous, results."""
    return inline_serializer(
        name,
        {
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer,
        },
    )


class SlugRelatedField(serializers.SlugRelatedField):
    """DRF's, refusing a NUL byte (400) before the lookup: PostgreSQL cannot compare text with
    one, and the driver's error was a 500."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and "\x00" in data:
            raise ValidationError(_("A value may not contain a NUL character."))
        return super().to_internal_value(data)
