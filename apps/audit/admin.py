from typing import Any

from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist
from django.db import transaction
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.audit.models import AuditEntry
from apps.audit.sentences import audit_sentence
from apps.audit.services import audit_changes, audit_record


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records nobody edits by hand: listed and shown, never added, changed or deleted."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _field_values(obj: Any, fields: list[str]) -> dict[str, Any]:
    """The named fields of `obj` as plain values (related rows by name, many-to-many joined)."""
    values: dict[str, Any] = {}
    for name in fields:
        try:
            field = obj._meta.get_field(name)
        except FieldDoesNotExist:
            continue
        if field.many_to_many:
            values[name] = ", ".join(sorted(str(o) for o in getattr(obj, name).all())) or None
        elif field.is_relation:
            values[name] = str(getattr(obj, name)) if getattr(obj, field.attname) else None
        else:
            # "" and None are both "empty" (a blank address is stored as NULL).
            values[name] = getattr(obj, name) if getattr(obj, name) != "" else None
    return values


class AuditedModelAdmin(admin.ModelAdmin):
    """Adding, changing and deleting in the Django admin writes the portal's audit trail
    (`<model>.create` / `.change` / `.delete` with the old and new value of each field), in the
    admin's own transaction, like the services do for the pages."""

    def _audit_fields(self, form: Any = None) -> list[str]:
        if form is not None:
            return list(form.base_fields)
        return [f.name for f in self.model._meta.concrete_fields if not f.primary_key]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before: dict[str, Any] = {}
        if change and obj.pk is not None:
            old = type(obj).objects.filter(pk=obj.pk).first()
            if old is not None:
                before = _field_values(old, self._audit_fields(form))
        form._audit_before = before
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # After the many-to-many fields are saved, so the entry records their new values too.
        super().save_related(request, form, formsets, change)
        obj = form.instance
        before = getattr(form, "_audit_before", {})
        changes = audit_changes(before, _field_values(obj, self._audit_fields(form)))
        if change and not changes:
            return  # saved without a change: nothing happened
        verb = "change" if change else "create"
        audit_record(
            actor=request.user,
            action=f"{obj._meta.model_name}.{verb}",
            obj=obj,
            changes=changes,
        )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        audit_record(
            actor=request.user,
            action=f"{obj._meta.model_name}.delete",
            obj=obj,
            changes=audit_changes(_field_values(obj, self._audit_fields()), {}),
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        # The list's bulk delete: one entry per row, like deleting them one by one.
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The whole trail, read-only."""

    list_display = ["at", "what_happened", "action"]
    list_filter = ["action"]
    search_fields = ["object_repr", "actor_name", "action"]
    date_hierarchy = "at"
    list_select_related = ["content_type"]

    @admin.display(description=_("what happened"))
    def what_happened(self, entry: AuditEntry) -> str:
        """The entry as the portal's pages say it, in the reader's language (the raw action
        stays in its own column for filtering)."""
        return audit_sentence(entry)
