"""Incident pages for support staff: the list, one incident and its actions (update, mass reply,
link and unlink tickets, solve, end, edit, merge)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views import View

from apps.core.actions import action_field_dispatch
from apps.tickets import selectors, services
from apps.tickets.forms import (
    IncidentEditForm,
    IncidentForm,
    IncidentMergeForm,
    IncidentUpdateForm,
    LinkForm,
    MassReplyForm,
)
from apps.tickets.models import Incident
from apps.tickets.signals_timeline import incident_signals, signal_kinds
from apps.tickets.views import SupportActionView, SupportRequiredMixin, _partial


class IncidentListView(SupportRequiredMixin, View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return render(
            request,
            "tickets/incident_list.html",
            {
                "incidents": selectors.incident_list(actor=request.user)[:100],
                "form": IncidentForm(),
            },
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        form = IncidentForm(request.POST)
        if form.is_valid():
            try:
                incident = services.incident_declare(actor=request.user, **form.cleaned_data)
            except services.TicketError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, _("Incident declared."))
                return redirect("tickets:incident_detail", pk=incident.pk)
        response = render(
            request,
            "tickets/incident_list.html",
            {"incidents": selectors.incident_list(actor=request.user)[:100], "form": form},
        )
        response.status_code = 400
        return response


def numbers_text(numbers: list[int]) -> str:
    """#3, #7 to #9 (en dash): ticket numbers with runs shortened, for messages."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"#{a}" if a == b else f"#{a}\u2013#{b}" for a, b in runs)


def _link_tickets(request: HttpRequest, incident: Incident, form: LinkForm) -> bool:
    """Link the tickets the form names; say which numbers name no ticket. False (with the error
    on the form) when none does."""
    wanted = form.cleaned_data["tickets"]
    tickets = list(selectors.ticket_list(actor=request.user, filters={}).filter(pk__in=wanted))
    missing = sorted(set(wanted) - {t.pk for t in tickets})
    text = numbers_text(missing)
    if not tickets:
        form.add_error(
            "tickets",
            ngettext(
                "There is no ticket %(numbers)s.", "There are no tickets %(numbers)s.", len(missing)
            )
            % {"numbers": text},
        )
        return False
    already = sum(1 for t in tickets if t.incident_id == incident.pk)
    count = services.incident_tickets_link(incident=incident, tickets=tickets, actor=request.user)
    done = ngettext("%(count)d ticket linked.", "%(count)d tickets linked.", count) % {
        "count": count
    }
    if already:
        done += " " + ngettext(
            "%(count)d was linked already.", "%(count)d were linked already.", already
        ) % {"count": already}
    messages.success(request, done)
    if missing:
        messages.warning(
            request,
            ngettext(
                "There is no ticket %(numbers)s; it was not linked.",
                "There are no tickets %(numbers)s; they were not linked.",
                len(missing),
            )
            % {"numbers": text},
        )
    return True


def _mass_reply(
    request: HttpRequest, incident: Incident, form: MassReplyForm, forms: dict[str, Any]
) -> bool:
    """Send the reply when the post confirms the preview's count; otherwise put the preview (one
    rendered message per language, the count) into `forms` and send nothing."""
    data = form.cleaned_data
    preview = services.incident_mass_reply_preview(
        incident=incident, actor=request.user, body=data["body"], body_de=data["body_de"]
    )
    confirmed = data["confirmed_count"]
    if confirmed is not None and confirmed == preview.count and preview.count:
        broadcast = services.incident_mass_reply(
            incident=incident,
            actor=request.user,
            body=data["body"],
            body_de=data["body_de"],
            solve=data["solve"],
        )
        count = broadcast.messages.count()
        messages.success(
            request,
            ngettext(
                "Reply queued for %(count)d ticket.", "Reply queued for %(count)d tickets.", count
            )
            % {"count": count},
        )
        return True
    if confirmed is not None and confirmed != preview.count:
        messages.warning(
            request,
            _(
                "The number of active tickets changed from %(before)d to %(now)d since the "
                "preview: nothing was sent. Check the preview again."
            )
            % {"before": confirmed, "now": preview.count},
        )
    forms["preview"] = preview
    forms["reply_form"] = MassReplyForm(initial={**data, "confirmed_count": preview.count})
    return False


class IncidentPage(SupportRequiredMixin, View):
    """The incident page's parts shared by the page and its actions."""

    def _context(self, incident: Incident, **forms: Any) -> dict[str, Any]:
        tickets = incident.tickets.select_related("assignee").order_by("-created_at")
        return {
            "incident": incident,
            "tickets": tickets,
            "counts": dict(tickets.values_list("status").annotate(n=Count("id")).order_by()),
            "active_count": tickets.filter(status__in=["new", "open", "waiting"]).count(),
            "updates": incident.updates.select_related("author"),
            "broadcasts": incident.broadcasts.annotate(
                total=Count("messages"),
                sent=Count("messages", filter=Q(messages__sent_at__isnull=False)),
            ),
            "update_form": forms.get("update_form") or IncidentUpdateForm(),
            "reply_form": forms.get("reply_form") or MassReplyForm(),
            "preview": forms.get("preview"),
            "link_form": forms.get("link_form") or LinkForm(),
            "edit_form": forms.get("edit_form")
            or IncidentEditForm(
                initial={
                    "title": incident.title,
                    "title_de": incident.title_de,
                    "public": incident.public,
                    "buildings": list(incident.buildings.all()),
                }
            ),
            "merge_form": forms.get("merge_form") or IncidentMergeForm(incident=incident),
            "signals": incident_signals(incident),
            "signal_kinds": signal_kinds(),
        }


class IncidentActionView(SupportActionView, IncidentPage):
    page = "tickets:incident_detail"

    def page_object(self, request: HttpRequest, pk: int) -> Incident:
        return get_object_or_404(Incident, pk=pk)

    def page_render(
        self, request: HttpRequest, obj: Incident, forms: dict[str, Any]
    ) -> HttpResponse:
        return render(request, "tickets/incident_detail.html", self._context(obj, **forms))


class IncidentUpdateView(IncidentActionView):
    action = "update"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["update_form"] = IncidentUpdateForm(request.POST)
        if not form.is_valid():
            return None
        services.incident_update_post(incident=incident, actor=request.user, **form.cleaned_data)
        messages.success(request, _("Update published."))
        return redirect("tickets:incident_detail", pk=incident.pk)


class IncidentMassReplyView(IncidentActionView):
    action = "mass_reply"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["reply_form"] = MassReplyForm(request.POST)
        if not form.is_valid():
            return None
        if _mass_reply(request, incident, form, forms):
            return redirect("tickets:incident_detail", pk=incident.pk)
        return render(request, "tickets/incident_detail.html", self._context(incident, **forms))


class IncidentLinkView(IncidentActionView):
    action = "link"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["link_form"] = LinkForm(request.POST)
        if form.is_valid() and _link_tickets(request, incident, form):
            return redirect("tickets:incident_detail", pk=incident.pk)
        return None


class IncidentUnlinkView(IncidentActionView):
    action = "unlink"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        tickets = incident.tickets.filter(pk=request.POST.get("ticket") or 0)
        services.incident_tickets_link(incident=None, tickets=tickets, actor=request.user)
        return redirect("tickets:incident_detail", pk=incident.pk)


class IncidentSolveView(IncidentActionView):
    action = "solve"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        count = services.incident_tickets_solve(incident=incident, actor=request.user)
        messages.success(
            request,
            ngettext("%(count)d ticket solved.", "%(count)d tickets solved.", count)
            % {"count": count},
        )
        return redirect("tickets:incident_detail", pk=incident.pk)


class IncidentEndView(IncidentActionView):
    action = "end"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        services.incident_end(
            incident=incident, actor=request.user, body=request.POST.get("body", "")
        )
        messages.success(request, _("Incident ended."))
        return redirect("tickets:incident_detail", pk=incident.pk)


class IncidentEditView(IncidentActionView):
    action = "edit"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["edit_form"] = IncidentEditForm(request.POST)
        if not form.is_valid():
            return None
        services.incident_edit(incident=incident, actor=request.user, **form.cleaned_data)
        messages.success(request, _("Incident changed."))
        return redirect("tickets:incident_detail", pk=incident.pk)


class IncidentMergeView(IncidentActionView):
    action = "merge"

    def act(
        self, request: HttpRequest, incident: Incident, forms: dict[str, Any]
    ) -> HttpResponse | None:
        form = forms["merge_form"] = IncidentMergeForm(request.POST, incident=incident)
        if not form.is_valid():
            return None
        target = services.incident_merge(
            source=incident, target=form.cleaned_data["target"], actor=request.user
        )
        messages.success(request, _("Incidents merged."))
        return redirect("tickets:incident_detail", pk=target.pk)


INCIDENT_ACTION_VIEWS = (
    IncidentUpdateView,
    IncidentMassReplyView,
    IncidentLinkView,
    IncidentUnlinkView,
    IncidentSolveView,
    IncidentEndView,
    IncidentEditView,
    IncidentMergeView,
)


class IncidentDetailView(IncidentPage):
    """Updates, linked tickets, link by hand, one reply to all, solve all, end (each form posts
    to its action's own view)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        incident = get_object_or_404(Incident, pk=pk)
        template = _partial(request, "tickets/incident_detail.html", "incident-tickets")
        return render(request, template, self._context(incident))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A form that names its action in an `action` field (as before the per-action URLs)."""
        get_object_or_404(Incident, pk=pk)  # 404 before anything else, as before
        return action_field_dispatch(request, INCIDENT_ACTION_VIEWS, pk=pk)
