"""Every new write to network state (forwards, openings) reaches network_changed exactly once per
transaction, after the commit; a refusal reaches it never."""

from unittest import mock

import pytest

from apps.network import errors
from apps.network import services as network
from apps.network.ports import PortRange
from tests.factories import device_add, forward_add, member_active, opening_add

pytestmark = pytest.mark.django_db

WRITES = {
    "port_forward_create": lambda m, d, f, o: forward_add(m, d, ports="9000"),
    "port_forward_change": lambda m, d, f, o: network.port_forward_change(
        forward=f, public_ports=PortRange(9100, 9100), actor=None
    ),
    "port_forward_delete": lambda m, d, f, o: network.port_forward_delete(forward=f, actor=None),
    "ipv6_opening_create": lambda m, d, f, o: opening_add(d, ports="9000"),
    "ipv6_opening_change": lambda m, d, f, o: network.ipv6_opening_change(
        opening=o, enabled=False, actor=None
    ),
    "ipv6_opening_delete": lambda m, d, f, o: network.ipv6_opening_delete(opening=o, actor=None),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_each_rule_write_calls_the_hook_once(name, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
        device = device_add(member)
        forward = forward_add(member, device, ports="8080")
        opening = opening_add(device, ports="443")
    with (
        mock.patch("apps.network.hooks.network_changed") as hook,
        django_capture_on_commit_callbacks(execute=True),
    ):
        WRITES[name](member, device, forward, opening)
    assert hook.call_count == 1


def test_a_refusal_never_calls_the_hook(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        member = member_active()
        device = device_add(member)
        forward_add(member, device, ports="8080")
    with (
        mock.patch("apps.network.hooks.network_changed") as hook,
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(errors.PortForwardConflict),
    ):
        forward_add(member, device, ports="8080")
    assert hook.call_count == 0
