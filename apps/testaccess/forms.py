"""Test-access forms: grant or extend (last day and profile), end, and the older grant form."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.network.models import ShapingProfile
from apps.network.selectors import shaping_profiles


class MemberTestAccessForm(forms.Form):
    """Grant a test access until a last day after today (the member page's older action form,
    with the default profile)."""

    until = forms.DateField(
        label=_("Test access until"), widget=forms.DateInput(attrs={"type": "date"})
    )

    def clean_until(self) -> Any:
        until = self.cleaned_data["until"]
        if until <= timezone.localdate():
            raise forms.ValidationError(_("The test access must end after today."))
        return until


class TestAccessForm(MemberTestAccessForm):
    """Grant or extend a test access: the last day and the shaping profile."""

    __test__ = False  # not a pytest class

    profile = forms.ModelChoiceField(
        label=_("Shaping profile"), queryset=ShapingProfile.objects.none(), empty_label=None
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.ModelChoiceField, self.fields["profile"])
        field.queryset = shaping_profiles()


class TestAccessEndForm(forms.Form):
    __test__ = False  # not a pytest class
    note = forms.CharField(label=_("Note (optional)"), max_length=200, required=False)
