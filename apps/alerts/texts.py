"""What an automatically opened incident says, in English and German (locale/de)."""

from __future__ import annotations

from django.utils import translation
from django.utils.translation import gettext as _

from apps.alerts.choices import AlertClass


def _title(klass: str, place: str) -> str:
    titles = {
        AlertClass.NO_PRIMARY: _("No firewall is active for %(place)s"),
        AlertClass.UNREACHABLE: _("The firewalls of %(place)s do not answer"),
        AlertClass.CONNTRACK: _("The firewall of %(place)s drops connections"),
        AlertClass.SOFTIRQ: _("The firewall of %(place)s is overloaded"),
        AlertClass.DHCP: _("Devices in %(place)s get no address"),
        AlertClass.PUSH: _("A firewall change for %(place)s is stuck"),
    }
    return titles.get(klass, _("Network problem in %(place)s")) % {"place": place}


def _place(buildings: list[str]) -> str:
    return ", ".join(buildings) if buildings else _("the whole network")


def _texts(language: str, klass: str, buildings: list[str]) -> dict[str, str]:
    with translation.override(language):
        place = _place(buildings)
        return {
            "title": _title(klass, place),
            "opened": _(
                "The monitoring noticed this on its own and opened this incident. "
                "We are looking into it; the next update follows here."
            ),
            "also": _("The monitoring also sees: %(problem)s") % {"problem": _title(klass, place)},
            "again": _("The monitoring sees the problem again."),
            "working": _(
                "The monitoring sees it working again. A member of the team will confirm "
                "the end here."
            ),
        }


def incident_texts(klass: str, buildings: list[str]) -> dict[str, tuple[str, str]]:
    """Each text as (English, German)."""
    en, de = _texts("en", klass, buildings), _texts("de", klass, buildings)
    return {key: (en[key], de[key]) for key in en}
