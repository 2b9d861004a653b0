"""Support staff's pages: the inbox, a ticket and its actions, attachments, the quarantine of
inbound mail and the statistics. Incidents: `incident_views`; members and the status page:
`member_views`. Each view parses, authorises, calls a selector or service and renders."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header, url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views import View

from apps.accounts.roles import Role, RoleRequiredMixin
from apps.core.actions import action_field_dispatch
from apps.core.htmx import htmx_partial
from apps.tickets import selectors, services
from apps.tickets.charts import stats_charts
from apps.tickets.choices import InboundStatus, TicketStatus
from apps.tickets.forms import (
    NoteForm,
    ReplyForm,
    TicketUpdateForm,
)
from apps.tickets.models import CannedResponse, InboundMail, Incident, Queue, Ticket


def _local_next(request: HttpRequest) -> str:
    """Where the inbox's bulk action returns: a path on this portal only, else the inbox (an
    open redirect would let a crafted form send staff anywhere)."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("tickets:inbox")


def _partial(request: HttpRequest, template: str, partial: str) -> str:
    if htmx_partial(request):
        return f"{template}#{partial}"
    return template


class SupportRequiredMixin(RoleRequiredMixin):
    """Support staff and admins. Volunteers work the desk, not the mailbox (data minimisation)."""

    required_roles = (Role.SUPPORT,)


# --- staff: inbox -----------------------------------------------------------------------------


class InboxView(SupportRequiredMixin, View):
    """All tickets, filtered; bulk actions; keyboard shortcuts (documented on the page)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        filters = request.GET.copy()
        if "status" not in filters:
            filters["status"] = "active"
        tickets = selectors.ticket_list(actor=request.user, filters=filters)
        page = Paginator(tickets, 50).get_page(request.GET.get("page"))
        query = filters.copy()
        query.pop("page", None)
        context = {
            "page": page,
            "filters": filters,
            "query": query.urlencode(),
            "statuses": TicketStatus.choices,
            "queues": Queue.objects.all(),
            "staff": selectors.support_staff(),
            "incidents": Incident.objects.filter(ended_at__isnull=True),
            "quarantined": InboundMail.objects.filter(status=InboundStatus.QUARANTINED).count(),
        }
        return render(
            request, _partial(request, "tickets/ticket_list.html", "ticket-table"), context
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        ids = [int(i) for i in request.POST.getlist("ticket") if i.isdigit()]
        action = request.POST.get("action", "")
        value: Any = request.POST.get("value", "")
        if action == "incident":
            number = str(value).strip().lstrip("#")
            value = Incident.objects.filter(pk=number).first() if number.isdigit() else None
            if value is None:  # None would unlink the tickets instead
                messages.error(
                    request,
                    _("There is no incident %(number)s; no ticket was changed.")
                    % {"number": f"#{number}" if number.isdigit() else f"“{number}”"},
                )
                return redirect(_local_next(request))
        tickets = selectors.ticket_list(actor=request.user, filters={}).filter(pk__in=ids)
        try:
            count = services.tickets_bulk_update(
                tickets=list(tickets), actor=request.user, action=action, value=value
            )
        except services.TicketError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(
                request,
                ngettext("%(count)d ticket changed.", "%(count)d tickets changed.", count)
                % {"count": count},
            )
        return redirect(_local_next(request))


# --- staff: one ticket ------------------------------------------------------------------------


class TicketPage(SupportRequiredMixin, View):
    """The ticket page's parts shared by the page and its actions."""

    def _ticket(self, request: HttpRequest, pk: int) -> Ticket:
        try:
            return selectors.ticket_get(actor=request.user, pk=pk)
        except Ticket.DoesNotExist:
            raise Http404 from None

    def _context(self, request: HttpRequest, ticket: Ticket, **forms: Any) -> dict[str, Any]:
        update_initial = {
            "status": ticket.status,
            "assignee": ticket.assignee_id,
            "queue": ticket.queue_id,
            "incident": ticket.incident_id,
            "tags": ", ".join(ticket.tags),
        }
        requester_tickets = []
        if ticket.requester_id or ticket.requester_email:
            other = Ticket.objects.exclude(pk=ticket.pk)
            other = (
                other.filter(requester=ticket.requester)
                if ticket.requester_id
                else other.filter(requester_email__iexact=ticket.requester_email)
            )
            requester_tickets = list(other.order_by("-created_at")[:5])
        return {
            "ticket": ticket,
            "thread": selectors.ticket_thread(actor=request.user, ticket=ticket),
            "events": ticket.events.select_related("actor")[:50],
            "reply_form": forms.get("reply_form") or ReplyForm(),
            "note_form": forms.get("note_form") or NoteForm(),
            "update_form": forms.get("update_form") or TicketUpdateForm(initial=update_initial),
            "canned": CannedResponse.objects.all(),
            "requester_tickets": requester_tickets,
            "context": selectors.ticket_member_context(actor=request.user, ticket=ticket),
            "claimed_member": selectors.ticket_claimed_member(ticket=ticket),
        }


class SupportActionView(SupportRequiredMixin, View):
    """One action on a ticket or incident, POSTed to its own URL. `act` returns the answer when
    done, or None to show the page again with the refused form (400)."""

    action: str  # its name in an older form's `action` field
    page: str  # the page's URL name

    def page_object(self, request: HttpRequest, pk: int) -> Any:
        raise NotImplementedError

    def page_render(self, request: HttpRequest, obj: Any, forms: dict[str, Any]) -> HttpResponse:
        raise NotImplementedError

    def act(self, request: HttpRequest, obj: Any, forms: dict[str, Any]) -> HttpResponse | None:
        raise NotImplementedError

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A reload (or a link on a refused form's page) shows the page itself."""
        query = request.META.get("QUERY_STRING", "")
        return redirect(reverse(self.page, args=[pk]) + (f"?{query}" if query else ""))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        obj = self.page_object(request, pk)
        forms: dict[str, Any] = {}
        try:
            if (done := self.act(request, obj, forms)) is not None:
                return done
        except services.TicketError as exc:
            messages.error(request, str(exc))
        response = self.page_render(request, obj, forms)
        response.status_code = 400
        return response


class TicketActionView(SupportActionView, TicketPage):
    page = "tickets:ticket_detail"

    def page_object(self, request: HttpRequest, pk: int) -> Ticket:
        return self._ticket(request, pk)

    def page_render(self, request: HttpRequest, obj: Ticket, forms: dict[str, Any]) -> HttpResponse:
        return render(request, "tickets/ticket_detail.html", self._context(request, obj, **forms))


class TicketReplyView(TicketActionView):
    action = "reply"

    def act(
        self, request: HttpRequest, ticket: Ticket, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["reply_form"] = ReplyForm(request.POST)
        if not form.is_valid():
            return None
        services.ticket_reply(
            ticket=ticket,
            actor=request.user,
            body=form.cleaned_data["body"],
            status=form.cleaned_data["status"],
        )
        messages.success(request, _("Reply sent."))
        return redirect("tickets:ticket_detail", pk=ticket.pk)


class TicketNoteView(TicketActionView):
    action = "note"

    def act(
        self, request: HttpRequest, ticket: Ticket, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["note_form"] = NoteForm(request.POST)
        if not form.is_valid():
            return None
        services.ticket_note(ticket=ticket, actor=request.user, body=form.cleaned_data["body"])
        messages.success(request, _("Note added."))
        return redirect("tickets:ticket_detail", pk=ticket.pk)


class TicketUpdateView(TicketActionView):
    action = "update"

    def act(
        self, request: HttpRequest, ticket: Ticket, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["update_form"] = TicketUpdateForm(request.POST)
        if not form.is_valid():
            return None
        services.ticket_update(ticket=ticket, actor=request.user, **form.cleaned_data)
        messages.success(request, _("Ticket updated."))
        return redirect("tickets:ticket_detail", pk=ticket.pk)


class TicketSenderConfirmView(TicketActionView):
    action = "confirm_sender"

    def act(
        self, request: HttpRequest, ticket: Ticket, forms: dict[str, Any]
    ) -> HttpResponse | None:
        ticket = services.ticket_sender_confirm(ticket=ticket, actor=request.user)
        messages.success(
            request,
            _("Sender confirmed: the ticket now belongs to %(name)s.")
            % {"name": ticket.requester_display},
        )
        return redirect("tickets:ticket_detail", pk=ticket.pk)


class TicketDetailView(TicketPage):
    """The thread, reply and note forms, ticket fields and the member's context (each form posts
    to its action's own view)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        ticket = self._ticket(request, pk)
        return render(request, "tickets/ticket_detail.html", self._context(request, ticket))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A form that names its action in an `action` field (as before the per-action URLs)."""
        self._ticket(request, pk)  # 404 before anything else, as before
        views = (TicketReplyView, TicketNoteView, TicketUpdateView, TicketSenderConfirmView)
        return action_field_dispatch(request, views, pk=pk)


class CannedFillView(SupportRequiredMixin, View):
    """htmx: the reply textarea filled with a canned response for this ticket."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        try:
            ticket = selectors.ticket_get(actor=request.user, pk=pk)
        except Ticket.DoesNotExist:
            raise Http404 from None
        canned = CannedResponse.objects.filter(pk=request.GET.get("canned") or 0).first()
        text = (
            services.canned_text(canned=canned, ticket=ticket, actor=request.user)
            if (canned)
            else request.GET.get("body", "")
        )
        form = ReplyForm(initial={"body": text})
        return render(
            request, "tickets/ticket_detail.html#reply-body", {"reply_form": form, "ticket": ticket}
        )


class AttachmentView(LoginRequiredMixin, View):
    """Download an attachment of a ticket the user may see (never internal to another member).

    Always served as a download with a neutral type, so a mailed HTML or SVG file cannot run
    in the portal's origin.
    """

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        attachment = selectors.attachment_get(actor=request.user, pk=pk)
        if attachment is None:
            raise Http404
        response = HttpResponse(bytes(attachment.data), content_type="application/octet-stream")
        response["Content-Disposition"] = content_disposition_header(True, attachment.filename)
        return response


class QuarantineView(SupportRequiredMixin, View):
    """Mail that could not become a ticket message, with its raw text; retry or dismiss."""

    def get(self, request: HttpRequest) -> HttpResponse:
        mails = Paginator(selectors.quarantine_list(actor=request.user), 50).get_page(
            request.GET.get("page")
        )
        shown = None
        if (pk := request.GET.get("show", "")).isdigit():
            shown = InboundMail.objects.filter(pk=pk).first()
        raw_text = bytes(shown.raw)[:100_000].decode("utf-8", "replace") if shown else ""
        return render(
            request,
            "tickets/quarantine_list.html",
            {"page": mails, "shown": shown, "raw_text": raw_text},
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        """A form that names its action in an `action` field; anything but retry dismisses."""
        views = (QuarantineRetryView, QuarantineDismissView)
        return action_field_dispatch(request, views, default="dismiss")


class QuarantineActionView(SupportRequiredMixin, View):
    """Retry or dismiss one quarantined mail (POST `mail`), then the quarantine again."""

    action: str

    def act(self, request: HttpRequest, inbound: InboundMail) -> None:
        raise NotImplementedError

    def get(self, request: HttpRequest) -> HttpResponse:
        return redirect("tickets:quarantine")

    def post(self, request: HttpRequest) -> HttpResponse:
        inbound = get_object_or_404(
            InboundMail, pk=request.POST.get("mail") or 0, status=InboundStatus.QUARANTINED
        )
        self.act(request, inbound)
        return redirect("tickets:quarantine")


class QuarantineRetryView(QuarantineActionView):
    action = "retry"

    def act(self, request: HttpRequest, inbound: InboundMail) -> None:
        services.inbound_process(inbound=inbound)
        if inbound.status == InboundStatus.QUARANTINED:
            messages.error(request, _("Still not readable: %(error)s") % {"error": inbound.error})
        else:
            messages.success(request, _("The mail was filed."))


class QuarantineDismissView(QuarantineActionView):
    action = "dismiss"

    def act(self, request: HttpRequest, inbound: InboundMail) -> None:
        services.inbound_dismiss(inbound=inbound, actor=request.user)
        messages.success(request, _("The mail was dismissed."))


class StatsView(SupportRequiredMixin, View):
    """New and open tickets per day and the median first-response time, as SVG charts."""

    def get(self, request: HttpRequest) -> HttpResponse:
        days = (
            min(max(int(request.GET.get("days", "30") or 30), 7), 90)
            if request.GET.get("days", "30").isdigit()
            else 30
        )
        stats = selectors.ticket_stats(days=days)
        return render(
            request,
            "tickets/stats.html",
            {"stats": stats, "charts": stats_charts(stats), "days": days},
        )
