"""`manage.py lab_resolver` (make run): the lab's hosts serve the members' names, forwarding to
pl-inet's authoritative server, so a demo device resolves `www.example` (docs/dns.md)."""

import json

import pytest
from django.core.management import CommandError, call_command

from apps.dhcp.models import DhcpSettings
from apps.firewall.models import FirewallHost

pytestmark = pytest.mark.django_db

LAB = {
    "hosts": [
        {"name": "pl-nat1", "address": "10.255.255.11",
         "resolver": {"address": "10.100.0.2", "control_socket": "/run/lab/pl-nat1/unbound.ctl",
                      "pid_file": "/run/lab/pl-nat1/unbound.pid", "user": ""}},
        {"name": "pl-nat2", "address": "10.255.255.12",
         "resolver": {"address": "10.100.0.3", "control_socket": "/run/lab/pl-nat2/unbound.ctl",
                      "pid_file": "/run/lab/pl-nat2/unbound.pid", "user": ""}},
    ],
    "dns_upstream": "203.0.113.53",
}  # fmt: skip


def _write(tmp_path, lab) -> str:
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(lab))
    return str(path)


def test_the_lab_hosts_serve_names_and_forward_into_the_lab_idempotently(tmp_path):
    path = _write(tmp_path, LAB)
    call_command("lab_register", file=path, no_devices=True)
    assert FirewallHost.objects.filter(resolver_address__isnull=False).count() == 0
    call_command("lab_resolver", file=path)
    call_command("lab_resolver", file=path)
    rows = dict(FirewallHost.objects.values_list("name", "resolver_address"))
    assert rows == {"pl-nat1": "10.100.0.2", "pl-nat2": "10.100.0.3"}
    host = FirewallHost.objects.get(name="pl-nat2")
    assert host.unbound_control_socket == "/run/lab/pl-nat2/unbound.ctl"
    assert DhcpSettings.load().resolver_forwarders == "203.0.113.53"


def test_bad_values_are_named_and_change_nothing(tmp_path):
    call_command("lab_register", file=_write(tmp_path, LAB), no_devices=True)
    bad = json.loads(json.dumps(LAB))
    bad["hosts"][1]["resolver"]["address"] = "10.100.0.3; rm -rf /"
    with pytest.raises(CommandError, match=r"pl-nat2 resolver: .* is not an IPv4 address"):
        call_command("lab_resolver", file=_write(tmp_path, bad))
    bad = json.loads(json.dumps(LAB))
    bad["hosts"][0]["resolver"]["control_socket"] = "../etc/passwd"
    with pytest.raises(CommandError, match="pl-nat1 control_socket: bad path"):
        call_command("lab_resolver", file=_write(tmp_path, bad))
    assert not FirewallHost.objects.filter(resolver_address__isnull=False).exists()
    assert DhcpSettings.load().resolver_forwarders == ""
    with pytest.raises(CommandError, match="build the lab first"):
        call_command("lab_resolver", file=str(tmp_path / "none.json"))
