"""Input shapes for the ticket and incident screens (no side effects)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.core.localtime import zone_label
from apps.core.moments import MomentFormField
from apps.members.models import Building
from apps.tickets.choices import IncidentPhase, IncidentSeverity, TicketStatus
from apps.tickets.models import Incident, Queue
from apps.tickets.selectors import support_staff


def split_list(value: str) -> list[str]:
    return [item.strip() for item in value.replace("\n", ",").split(",") if item.strip()]


class TicketForm(forms.Form):
    """Labels without Django's ":" suffix, like every other form of the portal (they are
    rendered with `as_div`, where the suffix is added)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class ReplyForm(TicketForm):
    body = forms.CharField(label=_("Reply"), widget=forms.Textarea(attrs={"rows": 6}))
    status = forms.ChoiceField(
        label=_("Then set the status to"),
        choices=TicketStatus.choices,
        initial=TicketStatus.WAITING,
    )


class NoteForm(TicketForm):
    body = forms.CharField(label=_("Internal note"), widget=forms.Textarea(attrs={"rows": 3}))


class IncidentChoiceField(forms.ModelChoiceField):
    """An incident picker that names each by number, start day and title."""

    def label_from_instance(self, obj: Any) -> str:
        return obj.choice_label


class TicketUpdateForm(TicketForm):
    status = forms.ChoiceField(label=_("Status"), choices=TicketStatus.choices)
    assignee = forms.ModelChoiceField(label=_("Assignee"), queryset=None, required=False)
    queue = forms.ModelChoiceField(label=_("Queue"), queryset=Queue.objects.all(), required=False)
    incident = IncidentChoiceField(
        label=_("Incident"),
        queryset=Incident.objects.filter(ended_at__isnull=True),
        required=False,
    )
    tags = forms.CharField(label=_("Tags"), required=False, help_text=_("Comma-separated"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["assignee"].queryset = support_staff()
        ticket_incident = self.initial.get("incident")
        if ticket_incident:  # keep an ended incident selectable on its own tickets
            self.fields["incident"].queryset = Incident.objects.filter(
                Q(ended_at__isnull=True) | Q(pk=ticket_incident)
            )

    def clean_tags(self) -> list[str]:
        return split_list(self.cleaned_data["tags"])


class TicketOpenForm(TicketForm):
    subject = forms.CharField(label=_("Subject"), max_length=300)
    body = forms.CharField(label=_("What happened?"), widget=forms.Textarea(attrs={"rows": 6}))


class MemberPostForm(TicketForm):
    body = forms.CharField(label=_("Your message"), widget=forms.Textarea(attrs={"rows": 4}))


def _default_start() -> Any:
    # Now, on the portal's clock: an earlier default ("an hour ago") read as a UTC clock and
    # put "since 20:12" beside the incident's own first update at 21:12. Whoever knows better
    # sets the real start; tickets since then get linked.
    return timezone.localtime().replace(second=0, microsecond=0)


def _buildings_field() -> forms.ModelMultipleChoiceField:
    return forms.ModelMultipleChoiceField(
        label=_("Affected buildings"),
        queryset=Building.objects.order_by("code"),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text=_("Tickets from members living there are linked automatically."),
    )


GERMAN_HELP = _("Optional: German readers see it; without it they see the English text.")


class IncidentForm(TicketForm):
    title = forms.CharField(label=_("Title"), max_length=200)
    title_de = forms.CharField(
        label=_("Title (German)"), max_length=200, required=False, help_text=GERMAN_HELP
    )
    description = forms.CharField(
        label=_("First public update"), widget=forms.Textarea(attrs={"rows": 3}), required=False
    )
    description_de = forms.CharField(
        label=_("First public update (German)"),
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text=GERMAN_HELP,
    )
    severity = forms.ChoiceField(
        label=_("Severity"), choices=IncidentSeverity.choices, initial=IncidentSeverity.MAJOR
    )
    buildings = _buildings_field()
    affected = forms.CharField(
        label=_("Affected services"),
        required=False,
        help_text=_("Comma-separated, e.g. Wi-Fi, mail"),
    )
    keywords = forms.CharField(
        label=_("Keywords"),
        required=False,
        help_text=_("Comma-separated; tickets mentioning one are linked automatically"),
    )
    started_at = MomentFormField(
        label=_("Started"),
        initial=_default_start,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    public = forms.BooleanField(label=_("Show on the status page"), required=False, initial=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The browser sends datetime-local without a zone: it is read in the portal's zone.
        self.fields["started_at"].help_text = _(
            "Local time, %(zone)s. Set it to when the problem began: tickets since then are "
            "linked automatically."
        ) % {"zone": zone_label()}

    def clean_affected(self) -> list[str]:
        return split_list(self.cleaned_data["affected"])

    def clean_keywords(self) -> list[str]:
        return split_list(self.cleaned_data["keywords"])


class IncidentEditForm(TicketForm):
    """What a person changes on an incident (opened by a person or by an alert)."""

    title = forms.CharField(label=_("Title"), max_length=200)
    title_de = forms.CharField(label=_("Title (German)"), max_length=200, required=False)
    buildings = _buildings_field()
    public = forms.BooleanField(label=_("Show on the status page"), required=False)


class IncidentMergeForm(TicketForm):
    """Fold this incident into another open one."""

    target = IncidentChoiceField(
        label=_("Merge into"), queryset=Incident.objects.filter(ended_at__isnull=True)
    )

    def __init__(self, *args: Any, incident: Incident, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].queryset = Incident.objects.filter(ended_at__isnull=True).exclude(
            pk=incident.pk
        )


class IncidentUpdateForm(TicketForm):
    phase = forms.ChoiceField(label=_("Phase"), choices=IncidentPhase.choices)
    body = forms.CharField(label=_("Update"), widget=forms.Textarea(attrs={"rows": 3}))
    body_de = forms.CharField(
        label=_("Update (German)"),
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text=GERMAN_HELP,
    )


MASS_REPLY_HELP = _(
    'Placeholders: {greeting} ("Hello Anna,", or "Hello," when the first name is unknown), '
    "{first_name}, {name}, {ticket_number} (with its # sign: #12), {subject}"
)


class MassReplyForm(TicketForm):
    """The reply to every active linked ticket; `confirmed_count` is set by the preview, and
    only a post that carries it (still matching) sends."""

    body = forms.CharField(
        label=_("Reply in English"),
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text=MASS_REPLY_HELP,
    )
    body_de = forms.CharField(
        label=_("Reply in German (optional)"),
        widget=forms.Textarea(attrs={"rows": 5}),
        required=False,
        help_text=_(
            "When given, requesters who chose German get this text; those who chose no "
            "language get both."
        ),
    )
    solve = forms.BooleanField(label=_("and mark them solved"), required=False)
    confirmed_count = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The update form on the same page has a "body" too: ids must differ.
        kwargs.setdefault("auto_id", "id_mass_%s")
        super().__init__(*args, **kwargs)


# A typo such as 1-100000 must not make a hundred thousand lookups.
LINK_MAX_TICKETS = 500


class LinkForm(TicketForm):
    tickets = forms.CharField(
        label=_("Ticket numbers"), help_text=_("e.g. 12, 15, #17 or a range 334-353")
    )

    def clean_tickets(self) -> list[int]:
        """The numbers in the order given, each once; ranges (334-353, #334-#353, with an en dash too) expanded."""
        text = re.sub(r"\s*[-\u2013]\s*", "-", self.cleaned_data["tickets"])  # "334 - 353"
        numbers: dict[int, None] = {}
        for item in split_list(text.replace(" ", ",")):
            first, dash, last = item.partition("-")
            first, last = first.strip().lstrip("#"), last.strip().lstrip("#")
            if not first.isdigit() or (dash and not last.isdigit()):
                raise forms.ValidationError(
                    _("Not a ticket number or range: %(item)s"), params={"item": item}
                )
            low, high = int(first), int(last) if dash else int(first)
            if high < low:
                raise forms.ValidationError(
                    _("The range %(item)s runs backwards; write the smaller number first."),
                    params={"item": item},
                )
            if high - low + 1 + len(numbers) > LINK_MAX_TICKETS:
                raise forms.ValidationError(
                    _("At most %(max)d tickets at a time."), params={"max": LINK_MAX_TICKETS}
                )
            numbers.update(dict.fromkeys(range(low, high + 1)))
        return list(numbers)
