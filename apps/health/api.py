"""API: the status of the background processes (admins)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import IsAdminRole
from apps.health.heartbeat import celery_status


class SystemStatusAPI(APIView):
    """Whether Celery workers answer a ping and beat is scheduling."""

    permission_classes = [IsAdminRole]

    class SystemStatusSerializer(serializers.Serializer):
        workers = serializers.ListField(child=serializers.CharField())
        workers_alive = serializers.BooleanField()
        beat_alive = serializers.BooleanField()
        beat_seen = serializers.DateTimeField(allow_null=True)
        heartbeat_alive = serializers.BooleanField()
        heartbeat_seen = serializers.DateTimeField(allow_null=True)
        heartbeat_worker = serializers.CharField()
        redis_error = serializers.CharField()

    @extend_schema(responses=SystemStatusSerializer)
    def get(self, request: Request) -> Response:
        return Response(self.SystemStatusSerializer(celery_status()).data)
