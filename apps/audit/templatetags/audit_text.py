"""Template helpers that turn audit entries and version causes into sentences."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from apps.audit.sentences import audit_sentence, cause_sentences, change_rows

register = template.Library()


@register.filter
def sentence(entry: Any) -> SafeString:
    """{{ entry|sentence }}: "Anna Meier extended the test access of Ben Schulz until 3 Dec"."""
    return audit_sentence(entry)


@register.simple_tag
def cause_text(cause: str, members: Mapping[int, Any] | None = None) -> SafeString:
    """{% cause_text version.cause members %}: the cause's sentences, one per line."""
    parts = cause_sentences(cause or "", members=members)
    return format_html_join("", '<span class="cause">{}</span>', ((p,) for p in parts))


@register.filter
def changes(entry: Any) -> list[tuple[str, Any, Any]]:
    """{% for label, old, new in entry|changes %}: each change with its field's name in words."""
    return change_rows(entry)
