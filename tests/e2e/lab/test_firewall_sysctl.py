"""The sysctl file deploy/ tells firewall hosts to install names settings this kernel has."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[3]


def settings_of(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def test_every_setting_exists_and_the_hash_is_a_quarter_of_the_table(lab):
    # The lab's firewall hosts run NAT, so nf_conntrack is loaded and its settings exist.
    wanted = settings_of(ROOT / "deploy/firewall/90-portal-firewall.conf")
    missing = [k for k in wanted if not (Path("/proc/sys") / k.replace(".", "/")).exists()]
    assert missing == []
    assert int(wanted["net.netfilter.nf_conntrack_buckets"]) * 4 == int(
        wanted["net.netfilter.nf_conntrack_max"]
    )
    assert int(wanted["net.netfilter.nf_conntrack_tcp_timeout_established"]) < 5 * 86400
