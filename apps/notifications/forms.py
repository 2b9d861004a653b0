"""The preferences form: a language and, per kind, mail on or off."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from apps.notifications.choices import NoticeKind
from apps.notifications.models import Preference


def mail_field(kind: str) -> str:
    return f"mail_{kind}"


class PreferenceForm(forms.Form):
    language = forms.ChoiceField(
        label=_("Language of notices and mails"),
        choices=[("", _("English and German")), *settings.LANGUAGES],
        required=False,
    )

    def __init__(self, *args: Any, preference: Preference, **kwargs: Any) -> None:
        kwargs.setdefault(
            "initial",
            {
                "language": preference.language,
                **{mail_field(k): preference.wants_mail(k) for k in NoticeKind.values},
            },
        )
        super().__init__(*args, **kwargs)
        for kind, label in NoticeKind.choices:
            self.fields[mail_field(kind)] = forms.BooleanField(label=label, required=False)

    def kind_fields(self) -> list[forms.BoundField]:
        return [self[mail_field(kind)] for kind in NoticeKind.values]

    def mail_choices(self) -> dict[str, bool]:
        return {kind: self.cleaned_data[mail_field(kind)] for kind in NoticeKind.values}
