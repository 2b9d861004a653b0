"""A host's interfaces and shaping layout: refused in the admin when the compiler would refuse
them, and compiled into the host's rule set."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.firewall.compiled import ruleset_compile
from apps.firewall.models import FirewallHost
from tests.factories import device_add, member_on_test

pytestmark = pytest.mark.django_db


def errors_of(**fields):
    host = FirewallHost(name="fw", address="10.255.255.11", **fields)
    with pytest.raises(ValidationError) as caught:
        host.full_clean()
    return caught.value.message_dict


def test_interfaces_the_compiler_would_refuse_are_refused_with_a_message():
    assert "member_interfaces" in errors_of(member_interfaces="eth0; reboot")
    assert "uplink_interfaces" in errors_of(uplink_interfaces=" , ")
    assert "member_interfaces" in errors_of(member_interfaces="a-very-long-interface-name")
    both = errors_of(member_interfaces="eth0,eth1", uplink_interfaces="eth1")
    assert both == {"uplink_interfaces": ["eth1 is also a member-side interface."]}


def test_several_queues_need_the_mq_layout():
    assert errors_of(tx_queues=4) == {
        "tx_queues": ["One HTB has one queue: choose the mq layout for more."]
    }
    assert "tx_queues" in errors_of(shaping_root="mq", tx_queues=65)
    FirewallHost(
        name="fw", address="10.255.255.11", shaping_root="mq", tx_queues=4
    ).full_clean()  # fine


def test_the_layout_reaches_the_compiled_shaping():
    FirewallHost.objects.create(
        name="multi",
        address="10.255.255.11",
        member_interfaces="eth1, eth2",
        uplink_interfaces="eth0",
        shaping_root="mq",
        tx_queues=4,
        link_kbit=1_000_000,
    )
    device_add(member_on_test())  # a shaped member
    (version,) = ruleset_compile(cause="layout")
    tc = version.tc_text
    for dev in ("eth0", "eth1", "eth2"):
        assert f"qdisc replace dev {dev} root handle 1: mq" in tc
    assert "rate 1000000kbit" in tc
    assert '"eth1", "eth2"' in version.nft_text  # both member-side interfaces in the rules
