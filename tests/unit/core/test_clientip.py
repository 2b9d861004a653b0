"""Which address the portal believes is the client's, behind its own proxies and in front of others."""

import pytest
from django.test import RequestFactory

from apps.core.clientip import client_ip


def ask(remote, forwarded=None):
    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_ip(RequestFactory().get("/", **meta))


def test_a_direct_client_is_its_tcp_peer_and_its_forged_header_is_ignored():
    assert ask("192.0.2.7", "10.9.9.9") == "192.0.2.7"


def test_behind_the_trusted_proxy_the_forwarded_client_counts():
    assert ask("127.0.0.1", "198.51.100.4") == "198.51.100.4"


def test_a_client_cannot_prepend_a_forged_hop_through_the_proxy():
    # The client sent "X-Forwarded-For: 10.0.0.1"; nginx appended the real peer.
    assert ask("127.0.0.1", "10.0.0.1, 198.51.100.4") == "198.51.100.4"


@pytest.mark.parametrize("junk", ["not-an-address", "198.51.100.4\x00", ""])
def test_junk_in_the_header_falls_back_to_the_peer(junk, settings):
    assert ask("127.0.0.1", junk) == "127.0.0.1"


def test_chained_trusted_proxies_are_skipped(settings):
    settings.PORTAL_TRUSTED_PROXIES = ["127.0.0.1/32", "10.255.0.0/16"]
    assert ask("127.0.0.1", "198.51.100.4, 10.255.1.1") == "198.51.100.4"


def test_ports_and_brackets_are_understood():
    assert ask("127.0.0.1", "[2001:db8::5]:4711") == "2001:db8::5"
    assert ask("127.0.0.1", "198.51.100.4:4711") == "198.51.100.4"
