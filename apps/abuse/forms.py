"""The lookup form: the shape of the three inputs; apps/abuse/inputs.py checks their meaning."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.abuse.inputs import REASON_MAX, LookupInvalid, lookup_inputs_clean, portal_zone


class LookupForm(forms.Form):
    address = forms.CharField(
        label=_("Address"),
        max_length=100,
        help_text=_("A public or private IPv4 address, or an IPv6 address."),
    )
    at = forms.CharField(
        label=_("Point in time"),
        max_length=60,
        help_text="",
    )
    reason = forms.CharField(
        label=_("Reason"),
        max_length=REASON_MAX,
        help_text=_("Required and audited: the complaint, ticket or request you answer."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["at"].help_text = _(
            "As 2026-11-17 03:12 or 2026-11-17 03:12:05, read in %(zone)s; or with an offset "
            "(2026-11-17T02:12:05Z, +01:00) as complaints often give it."
        ) % {"zone": portal_zone().key}
        self.fields["address"].error_messages["required"] = _(
            "Enter the address the complaint is about."
        )
        self.fields["at"].error_messages["required"] = _(
            "Enter the point in time the complaint names."
        )
        self.fields["reason"].error_messages["required"] = _(
            "Say why you look this up (e.g. the complaint's ticket or reference number)."
        )

    def clean(self) -> dict[str, Any]:
        """Check the meaning of every field, so one answer names everything that is wrong."""
        data = super().clean()
        try:
            lookup_inputs_clean(
                address=str(self.data.get("address", "")),
                at=str(self.data.get("at", "")),
                reason=str(self.data.get("reason", "")),
            )
        except LookupInvalid as exc:
            for field, messages in exc.errors.items():
                if field not in self.errors:
                    for message in messages:
                        self.add_error(field, message)
        return data
