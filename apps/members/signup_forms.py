"""The public sign-up form: input shape and validation only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.utils.translation import gettext_lazy as _

from apps.members.forms import RoomField
from apps.members.signup import room_accepts_sign_up


class SignUpForm(forms.Form):
    first_name = forms.CharField(label=_("First name"), max_length=150)
    last_name = forms.CharField(label=_("Last name"), max_length=150)
    email = forms.EmailField(
        label=_("E-mail"), help_text=_("You log in with this address; we write to it.")
    )
    phone = forms.CharField(label=_("Phone (optional)"), max_length=40, required=False)
    room = RoomField(label=_("Your room"))
    password1 = forms.CharField(
        label=_("Password"),
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=_("At least 8 characters; not only digits, not too close to your name."),
    )
    password2 = forms.CharField(
        label=_("Password again"),
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    # A field people never see (hidden by CSS and from screen readers); form-filling bots do.
    website = forms.CharField(label=_("Leave this empty"), required=False)

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip().lower()
        users = get_user_model().objects
        if (
            users.filter(email__iexact=email).exists()
            or users.filter(username__iexact=email).exists()
        ):
            raise forms.ValidationError(
                _(
                    "There is already an account with this e-mail address. Log in, or reset the "
                    "password if you forgot it."
                )
            )
        return email

    def clean_room(self) -> Any:
        room = self.cleaned_data["room"]
        if not room_accepts_sign_up(room=room):
            raise forms.ValidationError(
                _(
                    "Room %(room)s is not connected to the network yet; please ask at the office hours."
                ),
                params={"room": room.label},
            )
        return room

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("website"):
            raise forms.ValidationError(_("The sign-up could not be accepted."), code="spam")
        password, again = data.get("password1"), data.get("password2")
        if password and again and password != again:
            self.add_error("password2", _("The two passwords differ."))
        elif password:
            user = get_user_model()(
                username=data.get("email", ""),
                email=data.get("email", ""),
                first_name=data.get("first_name", ""),
                last_name=data.get("last_name", ""),
            )
            try:
                password_validation.validate_password(password, user)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return data
