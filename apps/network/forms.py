"""Device input: a name and a MAC in any common notation."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.network.mac import mac_normalize, mac_validate_unicast


class DeviceForm(forms.Form):
    name = forms.CharField(label=_("Device name"), max_length=60)
    mac = forms.CharField(
        label=_("MAC address"),
        max_length=40,
        help_text=_("Any notation: aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF, aabb.ccdd.eeff."),
    )

    def clean_name(self) -> str:
        return self.cleaned_data["name"].strip()

    def clean_mac(self) -> Any:
        mac = mac_normalize(self.cleaned_data["mac"])
        mac_validate_unicast(mac)
        return mac


class CsvImportForm(forms.Form):
    file = forms.FileField(
        label=_("CSV file"),
        help_text=_(
            "Columns: building, building_name, room, ipv4_subnet, ipv6_prefix (a header line "
            "first; the subnet columns are optional)."
        ),
    )
