"""Input shapes for the member pages (validation only; services do the work)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.members.models import Room
from apps.members.selectors import room_by_label, room_occupants, rooms_free


class RoomField(forms.CharField):
    """A room written as at the desk (A-101); cleans to the Room."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("label", _("Room"))
        kwargs.setdefault("help_text", _("Building code and room number, e.g. A-101."))
        kwargs.setdefault("max_length", 40)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Room:
        text = super().clean(value)
        room = room_by_label(label=text)
        if room is None:
            raise forms.ValidationError(
                _("There is no room “%(room)s”. Write it as building code and number, e.g. A-101."),
                params={"room": text},
            )
        return room


class RegisterForm(forms.Form):
    first_name = forms.CharField(label=_("First name"), max_length=150)
    last_name = forms.CharField(label=_("Last name"), max_length=150)
    email = forms.EmailField(label=_("E-mail"))
    phone = forms.CharField(label=_("Phone"), max_length=40, required=False)
    room = RoomField()


class MoveForm(forms.Form):
    """The new room, written as the search takes it ("b105", "B 105", "B-105"). A room where
    someone lives is refused with their names and the free rooms of that building until the
    volunteer ticks "move anyway" (a shared room is possible, but never by a typo)."""

    room = RoomField(label=_("New room"))
    share = forms.BooleanField(
        label=_("Move anyway if someone lives there (they share the room)"), required=False
    )

    def __init__(self, *args: Any, member: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member = member

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        room = data.get("room")
        if room is None or data.get("share"):
            return data
        occupants = room_occupants(room=room, exclude=self.member)
        if occupants:
            free = rooms_free(building_id=room.building_id)
            names = ", ".join(str(m) for m in occupants)
            message = _("%(room)s is occupied: %(names)s lives there.") % {
                "room": room.label,
                "names": names,
            }
            if free:
                message += " " + _("Free rooms in this building: %(rooms)s.") % {
                    "rooms": ", ".join(free)
                }
            else:
                message += " " + _("No room in this building is free.")
            message += " " + _("Tick “Move anyway” to move into %(room)s all the same.") % {
                "room": room.label
            }
            self.add_error("room", message)
        return data


class SuspendForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), max_length=200)


class CheckInForm(forms.Form):
    """Check-in needs the ID seen at the desk: the box is the volunteer's word for it."""

    identity_checked = forms.BooleanField(
        label=_("Identity checked: I have seen an official photo ID, and it matches this person."),
        error_messages={
            "required": _(
                "Tick “Identity checked” once you have seen the photo ID; nobody was checked in."
            )
        },
    )


class EndForm(forms.Form):
    note = forms.CharField(label=_("Note (optional)"), max_length=200, required=False)
    confirm = forms.BooleanField(
        label=_(
            "Yes, end this membership: the public address goes into quarantine and all devices are removed."
        ),
        error_messages={
            "required": _(
                "Tick the box to end the membership; nothing was changed. Ending cannot be undone."
            )
        },
    )


class ContactForm(forms.Form):
    email = forms.EmailField(label=_("E-mail"))
    phone = forms.CharField(label=_("Phone"), max_length=40, required=False)
