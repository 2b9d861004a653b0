"""Traffic pages: a member's panel (7/30/90 days), the staff's top talkers of an hour."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views import View

from apps.accounts.roles import StaffRequiredMixin
from apps.core.htmx import htmx_partial
from apps.core.localtime import zone_label
from apps.core.moments import moment_check
from apps.firewall.models import Site
from apps.members.models import Building, Member
from apps.traffic.charts import traffic_chart
from apps.traffic.selectors import PERIODS, member_traffic, top_talkers


def _days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days") or request.GET.get("traffic_days") or "30")
    except ValueError:
        return 30
    return days if days in PERIODS else 30


def panel_context(request: HttpRequest, member: Member) -> dict[str, Any]:
    data = member_traffic(member=member, days=_days(request))
    chart, unit = traffic_chart(data["series"])
    return {
        "member": member,
        "traffic": data,
        "chart": chart,
        "unit": unit,
        "periods": PERIODS,
        "zone": zone_label(),
    }


class MemberTrafficView(View):
    """The panel alone (htmx swaps it when the period changes): own member or staff."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.is_authenticated:
            raise Http404
        member = Member.objects.visible_to(request.user).filter(pk=pk).first()
        if member is None:
            raise Http404
        return render(request, "traffic/partials/panel.html", panel_context(request, member))


class TopForm(forms.Form):
    site = forms.ModelChoiceField(
        Site.objects.order_by("name"), required=False, empty_label=_("every site"), label=_("Site")
    )
    building = forms.ModelChoiceField(
        Building.objects.order_by("code"),
        required=False,
        empty_label=_("every building"),
        label=_("Building"),
    )
    day = forms.DateField(label=_("Day"), widget=forms.DateInput(attrs={"type": "date"}))
    hour = forms.TypedChoiceField(
        label=_("Hour"), coerce=int, choices=[(h, f"{h:02d}:00") for h in range(24)]
    )

    def clean_day(self) -> dt.date:
        try:
            return moment_check(self.cleaned_data["day"])  # type: ignore[return-value]
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


def _query(request: HttpRequest, moment: dt.datetime) -> str:
    """The page's query string for another hour, keeping site and building."""
    query = request.GET.copy()
    local = timezone.localtime(moment)
    query["day"], query["hour"] = local.date().isoformat(), str(local.hour)
    return query.urlencode()


class TopTalkersView(StaffRequiredMixin, View):
    """Who filled the uplink: the members with the most traffic in one hour (local time)."""

    template = "traffic/top.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        local = timezone.localtime()
        initial = {"day": local.date(), "hour": local.hour}
        form = TopForm(request.GET or None, initial=initial)
        status = 200
        if request.GET:
            if form.is_valid():
                data = form.cleaned_data
                day, hour = data["day"], data["hour"]
                site, building = data["site"], data["building"]
            else:
                status = 422 if not htmx_partial(request) else 200
                day, hour, site, building = local.date(), local.hour, None, None
        else:
            day, hour, site, building = local.date(), local.hour, None, None
        zone = timezone.get_current_timezone()
        moment = dt.datetime.combine(day, dt.time(hour), tzinfo=zone)
        result = top_talkers(hour=moment, site=site, building=building) if status == 200 else None
        context = {"form": form, "result": result, "moment": moment, "zone": zone_label()}
        if result is not None:
            context["steps"] = [
                (label, _query(request, moment + dt.timedelta(hours=delta)))
                for label, delta in ((_("previous hour"), -1), (_("next hour"), 1))
            ]
        template = self.template
        if htmx_partial(request):
            template += "#top-result"
        return render(request, template, context, status=status)
