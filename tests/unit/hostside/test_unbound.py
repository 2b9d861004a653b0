"""portal_fw.unbound (unbound-ctl): the resolver's check, its figures and the health part,
without root (the reload against a running Unbound is lab-tested: tests/e2e/lab/test_resolver_lab.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from portal_fw import health, unbound
from portal_fw.bundle import load_artefacts
from portal_fw.host import Host

GOOD = """server:
    chroot: ""
    username: ""
    interface: 127.0.0.1
    access-control: 0.0.0.0/0 refuse
remote-control:
    control-enable: yes
    control-interface: "{socket}"
    control-use-cert: no
"""

STATS = """thread0.num.queries=10
total.num.queries=1200
total.num.queries_ip_ratelimited=4000
total.num.cachehits=900
total.num.cachemiss=300
total.recursion.time.avg=0.012345
total.requestlist.current.all=2
num.answer.rcode.SERVFAIL=7
num.answer.rcode.NOERROR=1100
time.up=86.5
"""

needs_unbound = pytest.mark.skipif(
    shutil.which("unbound-checkconf") is None, reason="needs Debian's unbound (make test)"
)


def test_stats_become_the_portals_figures():
    assert unbound.parse_stats(STATS) == {
        "queries": 1200,
        "cache_hits": 900,
        "cache_misses": 300,
        "servfail": 7,
        "ratelimited": 4000,
        "recursion_avg_seconds": 0.012345,
        "requests_waiting": 2,
        "up_seconds": 86.5,
    }
    # An Unbound that answered no query yet has no SERVFAIL line: zero, not missing.
    assert unbound.parse_stats("total.num.queries=0\n")["servfail"] == 0


def test_a_file_without_a_local_control_socket_is_refused(tmp_path):
    conf = tmp_path / "unbound.conf"
    conf.write_text("server:\n    interface: 127.0.0.1\n")
    with pytest.raises(unbound.UnboundError, match="control-interface"):
        unbound.check(str(conf))
    assert unbound.main(["check", str(conf)]) == 1
    assert unbound.main(["restart", str(conf)]) == 2  # not a verb
    assert unbound.main(["reload", str(conf), "--unit"]) == 2


@needs_unbound
def test_unbound_checkconf_decides_and_its_message_comes_back(tmp_path):
    conf = tmp_path / "unbound.conf"
    conf.write_text(GOOD.format(socket=tmp_path / "ctl"))
    unbound.check(str(conf))
    conf.write_text(
        GOOD.format(socket=tmp_path / "ctl").replace('username: ""', 'username: "nosuchuser"')
    )
    with pytest.raises(unbound.UnboundError, match="nosuchuser"):
        unbound.check(str(conf))


def test_the_health_sample_carries_the_resolver_only_when_the_host_declares_one(tmp_path):
    host = Host(tmp_path, "t")
    assert "resolver" not in health.collect(host, 0)
    conf = tmp_path / "unbound.conf"
    conf.write_text(GOOD.format(socket=tmp_path / "ctl"))
    declared = tmp_path / "artefacts.json"
    declared.write_text(
        json.dumps({"unbound": {"path": str(conf), "check": ["unbound-ctl", "check", "{file}"]}})
    )
    host.artefacts = load_artefacts(declared)
    # Declared, but no Unbound answers on its socket: the sample says so instead of failing.
    figures = health.collect(host, 0)["resolver"]
    assert figures["ok"] is False
    assert figures["error"]
