"""The admin pages of django-otp's devices (TOTP and backup codes) with translated labels.

django-otp's models have no verbose names (the admin wrote "Throttling failure count" on German
pages too), and changing a third-party model's fields would make `makemigrations` want a
migration inside the installed package. So the portal registers the two device admins again:
form labels, read-only fields, list columns, filters and fieldset headings say it in the
reader's language; nothing about the models changes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Field
from django.http import HttpRequest
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _
from django_otp.plugins.otp_static.admin import StaticDeviceAdmin, StaticTokenInline
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.admin import TOTPDeviceAdmin
from django_otp.plugins.otp_totp.models import TOTPDevice

LABELS = {
    "user": _("user"),
    "name": _("name"),
    "confirmed": _("confirmed"),
    "key": _("secret key"),
    "step": _("time step (seconds)"),
    "t0": _("start time (t0)"),
    "digits": _("digits"),
    "tolerance": _("tolerance (time steps)"),
    "drift": _("clock drift (time steps)"),
    "throttling_failure_timestamp": _("last failed attempt"),
    "throttling_failure_count": _("failed attempts in a row"),
}
HELP = {
    "user": _("The login this device belongs to."),
    "name": _("A name for this device that people recognise."),
    "confirmed": _("Whether the device is ready for use."),
    "key": _("The secret, in hex (up to 40 bytes)."),
    "step": _("How many seconds each code is valid."),
    "t0": _("The Unix time at which counting starts."),
    "digits": _("How many digits a code has."),
    "tolerance": _("How many time steps before or after now are accepted."),
    "drift": _("How many time steps the device's clock is off."),
    "throttling_failure_timestamp": _("When the last failed attempt was made."),
    "throttling_failure_count": _("Failed attempts since the last success."),
}
HEADINGS = {
    "Identity": _("Identity"),
    "Timestamps": _("Times"),
    "Configuration": _("Configuration"),
    "State": _("State"),
    "Throttling": _("Throttling"),
}
# Read-only and list columns: methods of their own (the model field's name would win).
RENAMED = {"created_at": "created", "last_used_at": "last_used", "confirmed": "is_confirmed"}


def _titled(filter_class: type, title: Any) -> type:
    """A list filter class that shows `title` ("By created") in the reader's language."""

    class Titled(filter_class):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.title = title

    return Titled


class LabelledDeviceAdmin(admin.ModelAdmin):
    """Labels, columns and headings of a device admin in the reader's language."""

    list_display = ["user", "name", "created", "last_used", "is_confirmed"]
    list_filter = [
        ("created_at", _titled(admin.DateFieldListFilter, _("created"))),
        ("last_used_at", _titled(admin.DateFieldListFilter, _("last used"))),
        ("confirmed", _titled(admin.BooleanFieldListFilter, _("confirmed"))),
    ]

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, device: Any) -> Any:
        return device.created_at

    @admin.display(description=_("last used"), ordering="last_used_at")
    def last_used(self, device: Any) -> Any:
        return device.last_used_at

    @admin.display(description=_("confirmed"), boolean=True, ordering="confirmed")
    def is_confirmed(self, device: Any) -> bool:
        return bool(device.confirmed)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = super().get_readonly_fields(request, obj)
        return [RENAMED.get(name, name) for name in fields if name != "confirmed"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fieldsets = super().get_fieldsets(request, obj)
        renamed = []
        for heading, options in fieldsets:
            fields = [
                RENAMED.get(name, name) if name in ("created_at", "last_used_at") else name
                for name in options.get("fields", [])
            ]
            renamed.append((HEADINGS.get(heading, heading), {**options, "fields": fields}))
        return renamed

    def formfield_for_dbfield(self, db_field: Field, request: HttpRequest, **kwargs: Any) -> Any:
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if formfield is not None and db_field.name in LABELS:
            formfield.label = capfirst(LABELS[db_field.name])
        if formfield is not None and db_field.name in HELP:
            formfield.help_text = HELP[db_field.name]
        return formfield


class PortalTOTPDeviceAdmin(LabelledDeviceAdmin, TOTPDeviceAdmin):
    pass


class PortalStaticTokenInline(StaticTokenInline):
    verbose_name = _("backup code")
    verbose_name_plural = _("backup codes")


class PortalStaticDeviceAdmin(LabelledDeviceAdmin, StaticDeviceAdmin):
    inlines = [PortalStaticTokenInline]


def register(site: admin.AdminSite) -> None:
    """Put the labelled admins in place of django-otp's own, and name their models in the
    reader's language. Only the resolved names change, not `Meta.original_attrs`, from which
    the migration autodetector reads a model's options: no migration inside the package."""
    for model, one, many in (
        (TOTPDevice, _("authenticator app"), _("authenticator apps")),
        (StaticDevice, _("set of backup codes"), _("sets of backup codes")),
    ):
        model._meta.verbose_name, model._meta.verbose_name_plural = one, many
    for model, model_admin in (
        (TOTPDevice, PortalTOTPDeviceAdmin),
        (StaticDevice, PortalStaticDeviceAdmin),
    ):
        if site.is_registered(model):
            site.unregister(model)
        site.register(model, model_admin)
