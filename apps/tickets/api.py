"""API: tickets (members see their own, support all) and incidents (support staff)."""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import Role, has_role, role_permission
from apps.accounts.throttle import TicketCreateThrottle, TokenRateThrottle
from apps.core.api import (
    PageQuerySerializer,
    SlugRelatedField,
    page_response,
    paginated,
    query_validate,
)
from apps.core.moments import MomentSerializerField
from apps.members.models import Building
from apps.tickets import selectors, services
from apps.tickets.choices import (
    InboundStatus,
    IncidentPhase,
    IncidentSeverity,
    MessageKind,
    TicketStatus,
)
from apps.tickets.models import InboundMail, Incident, Queue, Ticket

IsSupportRole = role_permission(Role.SUPPORT)


class TicketQuerySerializer(serializers.Serializer):
    """The ticket list's filters; anything else, or a value of the wrong shape, answers 400."""

    search = serializers.CharField(
        required=False, max_length=200, help_text="Words in subject, sender or message text"
    )
    status = serializers.ChoiceField(choices=["active", *TicketStatus.values], required=False)
    queue = serializers.SlugField(required=False, max_length=50, help_text="Queue slug")
    assignee = serializers.RegexField(
        r"^(me|none|[0-9]{1,10})$", required=False, help_text="'me', 'none' or a user id"
    )
    incident = serializers.RegexField(
        r"^(any|none|[0-9]{1,10})$", required=False, help_text="'any', 'none' or an incident id"
    )
    tag = serializers.CharField(required=False, max_length=40)
    page = serializers.IntegerField(required=False, min_value=1)

    class Meta:
        ref_name = "TicketQuery"


class IncidentQuerySerializer(serializers.Serializer):
    current = serializers.BooleanField(required=False, help_text="Only incidents not ended")
    page = serializers.IntegerField(required=False, min_value=1)


class TicketListAPI(APIView):
    """List visible tickets (filters and ?search=) or open one as the requester (limited per
    member: PORTAL_THROTTLE_RATES["ticket_create"], then 429 with Retry-After)."""

    throttle_classes = [TokenRateThrottle, TicketCreateThrottle]

    class OutputSerializer(serializers.ModelSerializer):
        number = serializers.CharField()
        assignee = serializers.CharField(
            source="assignee.get_username", default=None, allow_null=True
        )
        queue = serializers.CharField(source="queue.slug", default=None, allow_null=True)

        class Meta:
            model = Ticket
            ref_name = "TicketListOutput"
            fields = [
                "id",
                "number",
                "subject",
                "status",
                "channel",
                "requester_email",
                "requester_name",
                "queue",
                "assignee",
                "tags",
                "incident",
                "created_at",
                "last_message_at",
                "first_response_at",
                "solved_at",
            ]

    class InputSerializer(serializers.Serializer):
        subject = serializers.CharField(max_length=300)
        body = serializers.CharField()

        class Meta:
            ref_name = "TicketCreateInput"

    @extend_schema(
        parameters=[TicketQuerySerializer],
        responses=paginated(OutputSerializer(many=True), "PaginatedTicketList"),
        operation_id="tickets_list",
    )
    def get(self, request: Request) -> Response:
        filters = query_validate(request, TicketQuerySerializer)
        tickets = selectors.ticket_list(actor=request.user, filters=filters)
        return page_response(request, tickets, self.OutputSerializer, self)

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            ticket = services.ticket_open(actor=request.user, **data.validated_data)
        except services.TicketError as exc:
            raise serializers.ValidationError({"detail": str(exc)}) from exc
        return Response(self.OutputSerializer(ticket).data, status=status.HTTP_201_CREATED)


class TicketDetailAPI(APIView):
    """One ticket with its thread (internal notes only for support staff); 404 if not yours."""

    class MessageSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        kind = serializers.ChoiceField(choices=MessageKind.choices)
        from_email = serializers.CharField()
        from_name = serializers.CharField()
        subject = serializers.CharField()
        body_text = serializers.CharField()
        is_automatic = serializers.BooleanField()
        created_at = serializers.DateTimeField()
        sent_at = serializers.DateTimeField(allow_null=True)

        class Meta:
            ref_name = "TicketMessageOutput"

    class OutputSerializer(serializers.ModelSerializer):
        number = serializers.CharField()
        assignee = serializers.CharField(
            source="assignee.get_username", default=None, allow_null=True
        )
        queue = serializers.CharField(source="queue.slug", default=None, allow_null=True)
        messages = serializers.SerializerMethodField()

        class Meta:
            model = Ticket
            ref_name = "TicketDetailOutput"
            fields = [
                "id",
                "number",
                "subject",
                "status",
                "channel",
                "requester_email",
                "requester_name",
                "queue",
                "assignee",
                "tags",
                "incident",
                "created_at",
                "last_message_at",
                "first_response_at",
                "solved_at",
                "messages",
            ]

        @extend_schema_field(serializers.ListField(child=serializers.DictField()))
        def get_messages(self, ticket: Ticket) -> list[dict]:
            thread = selectors.ticket_thread(actor=self.context["actor"], ticket=ticket)
            return TicketDetailAPI.MessageSerializer(thread, many=True).data

    class InputSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=TicketStatus.choices, required=False)
        reply = serializers.CharField(required=False)
        note = serializers.CharField(required=False)

        class Meta:
            ref_name = "TicketUpdateInput"

    def _ticket(self, request: Request, pk: int) -> Ticket:
        try:
            return selectors.ticket_get(actor=request.user, pk=pk)
        except Ticket.DoesNotExist:
            raise Http404 from None

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, pk: int) -> Response:
        ticket = self._ticket(request, pk)
        return Response(self.OutputSerializer(ticket, context={"actor": request.user}).data)

    @extend_schema(request=InputSerializer, responses=OutputSerializer, operation_id="tickets_act")
    def post(self, request: Request, pk: int) -> Response:
        """Support: reply, add a note or change the status. Requester: add a message (reply)."""
        ticket = self._ticket(request, pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        support = has_role(request.user, Role.SUPPORT)
        try:
            if support:
                if values.get("reply"):
                    services.ticket_reply(
                        ticket=ticket,
                        actor=request.user,
                        body=values["reply"],
                        status=values.get("status", TicketStatus.WAITING),
                    )
                elif values.get("status"):
                    services.ticket_update(
                        ticket=ticket, actor=request.user, status=values["status"]
                    )
                if values.get("note"):
                    services.ticket_note(ticket=ticket, actor=request.user, body=values["note"])
            else:
                if "status" in values or "note" in values:
                    raise serializers.ValidationError({"detail": "Only support staff may."})
                services.ticket_member_post(
                    ticket=ticket, actor=request.user, body=values.get("reply", "")
                )
        except services.TicketError as exc:
            raise serializers.ValidationError({"detail": str(exc)}) from exc
        ticket.refresh_from_db()
        return Response(self.OutputSerializer(ticket, context={"actor": request.user}).data)


class IncidentListAPI(APIView):
    """Incidents (support staff): list, declare."""

    permission_classes = [IsSupportRole]

    class OutputSerializer(serializers.ModelSerializer):
        ticket_count = serializers.IntegerField(read_only=True)
        active_count = serializers.IntegerField(read_only=True)
        buildings = serializers.SlugRelatedField(slug_field="code", many=True, read_only=True)

        class Meta:
            model = Incident
            ref_name = "IncidentOutput"
            fields = [
                "id",
                "title",
                "description",
                "severity",
                "buildings",
                "affected",
                "keywords",
                "public",
                "started_at",
                "ended_at",
                "ticket_count",
                "active_count",
            ]

    class InputSerializer(serializers.Serializer):
        title = serializers.CharField(max_length=200)
        description = serializers.CharField(required=False, allow_blank=True, default="")
        severity = serializers.ChoiceField(choices=IncidentSeverity.choices, default="major")
        buildings = SlugRelatedField(
            slug_field="code", many=True, queryset=Building.objects.all(), required=False
        )
        affected = serializers.ListField(child=serializers.CharField(max_length=80), default=list)
        keywords = serializers.ListField(child=serializers.CharField(max_length=80), default=list)
        started_at = MomentSerializerField(required=False, allow_null=True, default=None)
        public = serializers.BooleanField(default=True)

        class Meta:
            ref_name = "IncidentDeclareInput"

    @extend_schema(
        parameters=[IncidentQuerySerializer],
        responses=paginated(OutputSerializer(many=True), "PaginatedIncidentList"),
        operation_id="incidents_list",
    )
    def get(self, request: Request) -> Response:
        current = query_validate(request, IncidentQuerySerializer).get("current", False)
        incidents = selectors.incident_list(actor=request.user, current_only=current)
        return page_response(request, incidents, self.OutputSerializer, self)

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            incident = services.incident_declare(actor=request.user, **data.validated_data)
        except services.TicketError as exc:
            raise serializers.ValidationError({"detail": str(exc)}) from exc
        incident = selectors.incident_list(actor=request.user).get(pk=incident.pk)
        return Response(self.OutputSerializer(incident).data, status=status.HTTP_201_CREATED)


class IncidentDetailAPI(APIView):
    """One incident (support staff); POST an update, a reply to all linked tickets, or end it."""

    permission_classes = [IsSupportRole]

    class InputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=["update", "mass_reply", "solve", "end"])
        body = serializers.CharField(required=False, allow_blank=True, default="")
        phase = serializers.ChoiceField(choices=IncidentPhase.choices, default="investigating")
        solve = serializers.BooleanField(default=False)

        class Meta:
            ref_name = "IncidentActionInput"

    def _incident(self, request: Request, pk: int) -> Incident:
        try:
            return selectors.incident_list(actor=request.user).get(pk=pk)
        except Incident.DoesNotExist:
            raise Http404 from None

    @extend_schema(responses=IncidentListAPI.OutputSerializer)
    def get(self, request: Request, pk: int) -> Response:
        return Response(IncidentListAPI.OutputSerializer(self._incident(request, pk)).data)

    @extend_schema(
        request=InputSerializer,
        responses=inline_serializer("IncidentActionOutput", {"done": serializers.IntegerField()}),
        operation_id="incidents_act",
    )
    def post(self, request: Request, pk: int) -> Response:
        incident = self._incident(request, pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            if v["action"] == "update":
                services.incident_update_post(
                    incident=incident, actor=request.user, body=v["body"], phase=v["phase"]
                )
                done = 1
            elif v["action"] == "mass_reply":
                broadcast = services.incident_mass_reply(
                    incident=incident, actor=request.user, body=v["body"], solve=v["solve"]
                )
                done = broadcast.messages.count()
            elif v["action"] == "solve":
                done = services.incident_tickets_solve(incident=incident, actor=request.user)
            else:
                services.incident_end(incident=incident, actor=request.user, body=v["body"])
                done = 1
        except services.TicketError as exc:
            raise serializers.ValidationError({"detail": str(exc)}) from exc
        return Response({"done": done})


# --- one endpoint per action (support staff; the same services and audit as the pages) ---------


class TicketUpdateAPI(APIView):
    """Support: change a ticket's status, assignee, queue, tags or incident (each change is one
    event, as on the ticket page)."""

    permission_classes = [IsSupportRole]

    class InputSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=TicketStatus.choices, required=False)
        assignee = serializers.PrimaryKeyRelatedField(
            queryset=selectors.support_staff(), allow_null=True, required=False
        )
        queue = SlugRelatedField(
            slug_field="slug", queryset=Queue.objects.all(), allow_null=True, required=False
        )
        tags = serializers.ListField(
            child=serializers.CharField(max_length=40), max_length=50, required=False
        )
        incident = serializers.PrimaryKeyRelatedField(
            queryset=Incident.objects.all(), allow_null=True, required=False
        )

        class Meta:
            ref_name = "TicketFieldsInput"

    @extend_schema(request=InputSerializer, responses=TicketListAPI.OutputSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        try:
            ticket = selectors.ticket_get(actor=request.user, pk=pk)
        except Ticket.DoesNotExist:
            raise Http404 from None
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        incident = values.get("incident")
        if incident is not None and incident.ended_at and incident.pk != ticket.incident_id:
            raise serializers.ValidationError(
                {"incident": [_("This incident has ended; choose a current one.")]}
            )
        ticket = services.ticket_update(ticket=ticket, actor=request.user, **values)
        return Response(TicketListAPI.OutputSerializer(ticket).data)


class IncidentUpdateAPI(APIView):
    """Support: publish an update on an incident (the status page shows it)."""

    permission_classes = [IsSupportRole]

    class InputSerializer(serializers.Serializer):
        body = serializers.CharField()
        phase = serializers.ChoiceField(choices=IncidentPhase.choices)

        class Meta:
            ref_name = "IncidentUpdateInput"

    @extend_schema(
        request=InputSerializer,
        responses={
            201: inline_serializer("IncidentUpdateOutput", {"id": serializers.IntegerField()})
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        incident = IncidentDetailAPI()._incident(request, pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            update = services.incident_update_post(
                incident=incident, actor=request.user, **data.validated_data
            )
        except services.TicketError as exc:
            raise serializers.ValidationError({"body": [str(exc)]}) from exc
        return Response({"id": update.pk}, status=status.HTTP_201_CREATED)


class IncidentTicketsAPI(APIView):
    """Support: link tickets to an incident by number (POST), or unlink one (DELETE …/{ticket}/)."""

    permission_classes = [IsSupportRole]

    class InputSerializer(serializers.Serializer):
        tickets = serializers.ListField(
            child=serializers.IntegerField(min_value=1), min_length=1, max_length=500
        )

        class Meta:
            ref_name = "IncidentLinkInput"

    @extend_schema(
        request=InputSerializer,
        responses=inline_serializer(
            "IncidentLinkOutput",
            {
                "linked": serializers.IntegerField(),
                "missing": serializers.ListField(child=serializers.IntegerField()),
            },
        ),
    )
    def post(self, request: Request, pk: int) -> Response:
        incident = IncidentDetailAPI()._incident(request, pk)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        wanted = data.validated_data["tickets"]
        tickets = list(selectors.ticket_list(actor=request.user, filters={}).filter(pk__in=wanted))
        missing = sorted(set(wanted) - {t.pk for t in tickets})
        if not tickets:
            raise serializers.ValidationError(
                {"tickets": [_("There is no such ticket: %(n)s") % {"n": missing}]}
            )
        count = services.incident_tickets_link(
            incident=incident, tickets=tickets, actor=request.user
        )
        return Response({"linked": count, "missing": missing})


class IncidentTicketUnlinkAPI(APIView):
    permission_classes = [IsSupportRole]

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int, ticket: int) -> Response:
        incident = IncidentDetailAPI()._incident(request, pk)
        tickets = incident.tickets.filter(pk=ticket)
        if not tickets.exists():
            raise Http404
        services.incident_tickets_link(incident=None, tickets=tickets, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TicketBulkAPI(APIView):
    """Support: one inbox action on several tickets (status, assign to me, unassign, tag, link to
    an incident), each change one event as in the inbox."""

    permission_classes = [IsSupportRole]

    class InputSerializer(serializers.Serializer):
        tickets = serializers.ListField(
            child=serializers.IntegerField(min_value=1), min_length=1, max_length=500
        )
        action = serializers.ChoiceField(choices=sorted(services.BULK_ACTIONS))
        value = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=40,
            help_text="The tag (action tag) or the incident id (action incident).",
        )

        class Meta:
            ref_name = "TicketBulkInput"

    @extend_schema(
        request=InputSerializer,
        responses=inline_serializer("TicketBulkOutput", {"changed": serializers.IntegerField()}),
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        value: object = values.get("value", "")
        if values["action"] == "incident":
            number = str(value).strip().lstrip("#")
            value = Incident.objects.filter(pk=number).first() if number.isdigit() else None
            if value is None:  # None would unlink the tickets instead
                raise serializers.ValidationError({"value": [_("There is no such incident.")]})
        tickets = selectors.ticket_list(actor=request.user, filters={}).filter(
            pk__in=values["tickets"]
        )
        try:
            count = services.tickets_bulk_update(
                tickets=list(tickets), actor=request.user, action=values["action"], value=value
            )
        except services.TicketError as exc:
            raise serializers.ValidationError({"action": [str(exc)]}) from exc
        return Response({"changed": count})


class QuarantineOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = InboundMail
        fields = ["id", "received_at", "source", "envelope_from", "size", "status", "error"]


class QuarantineListAPI(APIView):
    """Support: mail that could not become a ticket message, newest first."""

    permission_classes = [IsSupportRole]

    @extend_schema(
        parameters=[PageQuerySerializer],
        responses=paginated(QuarantineOutputSerializer(many=True), "PaginatedQuarantineList"),
        operation_id="quarantine_list",
    )
    def get(self, request: Request) -> Response:
        query_validate(request, PageQuerySerializer)
        mails = selectors.quarantine_list(actor=request.user).order_by("-received_at", "-pk")
        return page_response(request, mails, QuarantineOutputSerializer, self)


def _quarantined(pk: int) -> InboundMail:
    mail = InboundMail.objects.filter(pk=pk, status=InboundStatus.QUARANTINED).first()
    if mail is None:
        raise Http404
    return mail


class QuarantineRetryAPI(APIView):
    """Support: read a quarantined mail again (after a fix); its status says how it went."""

    permission_classes = [IsSupportRole]

    @extend_schema(request=None, responses=QuarantineOutputSerializer)
    def post(self, request: Request, pk: int) -> Response:
        mail = services.inbound_process(inbound=_quarantined(pk))
        return Response(QuarantineOutputSerializer(mail).data)


class QuarantineDismissAPI(APIView):
    """Support: the mail needs no ticket (audited)."""

    permission_classes = [IsSupportRole]

    @extend_schema(request=None, responses=QuarantineOutputSerializer)
    def post(self, request: Request, pk: int) -> Response:
        mail = services.inbound_dismiss(inbound=_quarantined(pk), actor=request.user)
        return Response(QuarantineOutputSerializer(mail).data)
