"""The one field of every second-factor form: a code."""

from django import forms
from django.utils.translation import gettext_lazy as _


class CodeForm(forms.Form):
    """A six-digit code from the authenticator app, or a recovery code."""

    code = forms.CharField(
        label=_("Code"),
        max_length=32,
        strip=True,
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "autocapitalize": "off", "spellcheck": "false"}
        ),
    )
