"""API: who am I."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import user_roles


class MeAPI(APIView):
    """The caller's own account and roles."""

    class MeSerializer(serializers.Serializer):
        username = serializers.CharField()
        email = serializers.EmailField()
        first_name = serializers.CharField()
        last_name = serializers.CharField()
        roles = serializers.ListField(child=serializers.CharField())

    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        user = request.user
        data = {
            "username": user.get_username(),
            "email": user.email,
            "first_name": user.first_name,
            "last_name": user.last_name,
            "roles": sorted(user_roles(user)),
        }
        return Response(self.MeSerializer(data).data)
