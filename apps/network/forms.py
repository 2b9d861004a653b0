"""Device, port forward, IPv6 opening and test access input (validation only)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.core.mac import mac_normalize, mac_validate_unicast
from apps.network.choices import Protocol
from apps.network.models import Device
from apps.network.ports import PortRange, PortRangeError


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


class PortRangeField(forms.CharField):
    """`8080` or `8000-8010` (spaces tolerated); cleans to a PortRange (None when empty)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 20)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> PortRange | None:
        text = super().clean(value)
        if not text:
            return None
        try:
            return PortRange.parse(text)
        except PortRangeError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class DeviceChoiceField(forms.ModelChoiceField):
    """The member's devices by name."""

    def label_from_instance(self, obj: Any) -> str:
        return str(obj.name)


class _OwnDeviceForm(forms.Form):
    device = DeviceChoiceField(
        label=_("Device"),
        queryset=Device.objects.none(),
        error_messages={"invalid_choice": _("Choose one of your own devices.")},
    )

    def __init__(
        self, *args: Any, devices: Any = None, shown: list[Device] | None = None, **kwargs: Any
    ) -> None:
        """`devices`: the queryset a choice must be in; `shown`: those devices already read
        for the page, offered as they are (else rendering reads the queryset twice more)."""
        super().__init__(*args, **kwargs)
        field = cast(forms.ModelChoiceField, self.fields["device"])
        field.queryset = devices if devices is not None else Device.objects.none()
        field.empty_label = None
        if shown is not None:
            field.choices = [(d.pk, field.label_from_instance(d)) for d in shown]


class PortForwardForm(_OwnDeviceForm):
    protocol = forms.ChoiceField(label=_("Protocol"), choices=Protocol.choices)
    public_ports = PortRangeField(
        label=_("Public port(s)"), help_text=_("A port such as 8080 or a range such as 8000-8010.")
    )
    target_ports = PortRangeField(
        label=_("Port(s) on the device"),
        required=False,
        help_text=_("Empty: the same as the public ports."),
    )
    description = forms.CharField(label=_("Description"), max_length=100, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        public, target = data.get("public_ports"), data.get("target_ports")
        if public is not None and target is not None and public.size != target.size:
            self.add_error(
                "target_ports",
                _(
                    "As many ports as the public ones: %(public)s is %(n)d port(s), "
                    "%(target)s is %(m)d."
                )
                % {"public": public, "n": public.size, "target": target, "m": target.size},
            )
        return data


class Ipv6OpeningForm(_OwnDeviceForm):
    protocol = forms.ChoiceField(label=_("Protocol"), choices=Protocol.choices)
    ports = PortRangeField(
        label=_("Port(s)"),
        required=False,
        help_text=_("8080 or 8000-8010; empty opens all ports (TCP and UDP)."),
    )
    description = forms.CharField(label=_("Description"), max_length=100, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if (
            "ports" in data
            and data.get("ports") is None
            and data.get("protocol") not in (None, Protocol.BOTH)
        ):
            self.add_error(
                "ports",
                _("Give a port or range; all ports can only be opened for TCP and UDP together."),
            )
        return data
