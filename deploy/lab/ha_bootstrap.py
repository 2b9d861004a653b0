"""Write a lab host's first keepalived.conf and conntrackd.conf (lab.sh up), before the portal
pushes its own: the same generator (workers/ruleset/ha.py) with the lab's addresses, so the
pair fails over from the moment the lab is up. Standard library only (run by /usr/bin/python3).

Usage: ha_bootstrap.py HOST_NUMBER(1|2) RUN_DIR NOTIFY
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.ruleset import snapshot as rs
from workers.ruleset.ha import conntrackd_config, keepalived_config

# The lab contract (deploy/lab/lab.sh): what follows the primary of each family.
VIP4 = (("dorm0", "10.100.0.1/16"), ("inet0", "203.0.113.1/24"))
VIP6 = (("dorm0", "2001:db8:100::1/48"), ("inet0", "2001:db8:ffff::1/64"), ("dorm0", "fe80::1/64"))


def lab_ha(n: int, run_dir: str, notify: str) -> rs.Ha:
    peer = 3 - n
    return rs.Ha(
        sync_interface="pl-sync",
        local4=f"10.255.254.{n}",
        peer4=f"10.255.254.{peer}",
        local6=f"fdff:255:254::{n}",
        peer6=f"fdff:255:254::{peer}",
        priority4=200 if n == 1 else 100,
        priority6=100 if n == 1 else 200,
        addresses4=VIP4,
        addresses6=VIP6,
        track_interfaces=("dorm0", "inet0"),
        ignore_addresses=("10.255.255.11", "10.255.255.12"),
        run_dir=run_dir,
        notify=notify,
        conntrackd_config=f"{run_dir}/conntrackd.conf",
    )


def main() -> int:
    n, run_dir, notify = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    snapshot = rs.Snapshot(
        policy=rs.Policy(),
        host=rs.Host(name=f"pl-nat{n}", uplink_interfaces=("inet0",), member_interfaces=("dorm0",)),
        ha=lab_ha(n, run_dir, notify),
    )
    for name, text in (
        ("keepalived.conf", keepalived_config(snapshot)),
        ("conntrackd.conf", conntrackd_config(snapshot)),
    ):
        path = Path(run_dir) / name
        if not path.exists():  # a pushed config stays
            path.write_text(text or "")
            os.chmod(path, 0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main())
