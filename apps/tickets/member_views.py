"""Pages for members and the public: a member's own tickets, and the status page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.throttle import THROTTLED_MESSAGE, retry_text, throttle_hit
from apps.tickets import selectors, services
from apps.tickets.forms import MemberPostForm, TicketOpenForm
from apps.tickets.middleware import status_response
from apps.tickets.models import Ticket
from apps.tickets.status import status_data, status_html_get, status_html_set


class MyTicketListView(LoginRequiredMixin, View):
    """A member's own tickets, and a form to open one."""

    def get(self, request: HttpRequest) -> HttpResponse:
        tickets = selectors.ticket_list(actor=request.user, filters={}).filter(
            requester=request.user
        )
        return render(
            request,
            "tickets/my_ticket_list.html",
            {"tickets": tickets[:100], "form": TicketOpenForm()},
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        form = TicketOpenForm(request.POST)
        wait = None
        if form.is_valid() and (wait := throttle_hit("ticket_create", f"user:{request.user.pk}")):
            form.add_error(None, THROTTLED_MESSAGE % {"wait": retry_text(wait)})
        elif form.is_valid():
            try:
                ticket = services.ticket_open(actor=request.user, **form.cleaned_data)
            except services.TicketError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(
                    request,
                    _("Your ticket %(number)s is open. We will answer here and by mail.")
                    % {"number": ticket.number},
                )
                return redirect("tickets:my_ticket", pk=ticket.pk)
        tickets = selectors.ticket_list(actor=request.user, filters={}).filter(
            requester=request.user
        )
        response = render(
            request, "tickets/my_ticket_list.html", {"tickets": tickets[:100], "form": form}
        )
        response.status_code = 429 if wait else 400
        if wait:
            response["Retry-After"] = str(wait)
        return response


class MyTicketDetailView(LoginRequiredMixin, View):
    """One of the member's own tickets (404 for anyone else's, even for staff: they use the
    support page)."""

    def _ticket(self, request: HttpRequest, pk: int) -> Ticket:
        ticket = Ticket.objects.visible_to(request.user).filter(pk=pk, requester=request.user)
        found = ticket.first()
        if found is None:
            raise Http404
        return found

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        ticket = self._ticket(request, pk)
        return render(
            request,
            "tickets/my_ticket_detail.html",
            {
                "ticket": ticket,
                "thread": selectors.ticket_thread(actor=request.user, ticket=ticket).exclude(
                    kind="note"
                ),
                "form": MemberPostForm(),
            },
        )

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        ticket = self._ticket(request, pk)
        form = MemberPostForm(request.POST)
        if form.is_valid():
            try:
                services.ticket_member_post(
                    ticket=ticket, actor=request.user, body=form.cleaned_data["body"]
                )
            except services.TicketError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, _("Message sent."))
        return redirect("tickets:my_ticket", pk=pk)


# --- public status page -----------------------------------------------------------------------


class StatusPageView(View):
    """Public, no login, no session: served from the cache; the last good copy when the
    database does not answer. Warm requests never get here: StatusPageMiddleware answers them
    before sessions, authentication, CSRF and messages run."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        language = translation.get_language() or "en"
        html = status_html_get(language)
        if html is None:
            data, stale = status_data()
            html = render_to_string(
                "status/status_page.html", {"data": data, "stale": stale, "LANGUAGE_CODE": language}
            )
            if not stale:
                status_html_set(language, html)
        return status_response(html, language)
