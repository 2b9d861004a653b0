"""The kernel-lab cases: the product's compiled rule sets (from the compiler, for the lab's
snapshot in tests/e2e/ruleset/scenario.py) and the traffic each case sends inside the VM.

Every case prints `key=value` lines and fenced blocks; the tests in this directory read them.
Addresses: member 1's device 10.100.0.10 (public 198.51.100.5, forwards tcp 8080 -> 80 and
7007 -> 7007), member 2's device 10.100.0.20 (shaped to 2,000 kbit/s down), the Internet
client 203.0.113.10.
"""

from __future__ import annotations

import dataclasses
import sys
from ipaddress import IPv4Address
from pathlib import Path

# The host package (deploy/firewall/portal_fw): pytest finds it through pyproject's pythonpath,
# `make bench` (tests/bench/kernel_lab_bench.py) through this line.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "deploy" / "firewall"))
from portal_fw import offload, probes
from tests.e2e.kernel_lab.vm import Case
from tests.e2e.ruleset.scenario import DORM_ADDRESSES, HOST, POLICY, lab_members
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s
from workers.ruleset.ha import conntrackd_config, keepalived_config
from workers.ruleset.host import Ha

FAST = dataclasses.replace(HOST, fast_path=True)
DORM = " ".join(DORM_ADDRESSES)
TRANSFER_S = 6
CONTROL_S = 3  # the same traffic without the fast path: only its counters are compared
SHAPED_S = 6
PROBE_PORT = 5201


def rules(host: s.Host = FAST, policy: s.Policy = POLICY, members=None) -> dict[str, str]:
    compiled = compile_snapshot(
        s.Snapshot(policy=policy, host=host, members=members or lab_members())
    )
    return {"rules.nft": compiled.nft, "rules.tc": compiled.tc}


def without_forward(port: int) -> tuple[s.Member, ...]:
    """The lab's members with member 1's forward on public port `port` removed."""
    m1, *rest = lab_members()
    kept = tuple(f for f in m1.forwards if f.public_ports.first != port)
    return (dataclasses.replace(m1, forwards=kept), *rest)


# {expect}: what the flow's entry shows once it runs ([OFFLOAD] with the fast path).
TRAFFIC = """
load_rules . || exit 3
in_ns $INET iperf3 -s -1 -p {port} > server_out.log 2>&1 &
in_ns $DORM iperf3 -s -1 -p 7007 -B 10.100.0.10 > server_in.log 2>&1 &
sleep 1
# Outbound: member 1's device to the Internet (SNAT to 198.51.100.5).
in_ns $DORM timeout 20 iperf3 -c 203.0.113.10 -p {port} -B 10.100.0.10 -t {seconds} -J > out.json &
c=$!
wait_entry 'src=10.100.0.10 dst=203.0.113.10' '{expect}'
echo "offload_out=$(offloaded 'src=10.100.0.10 dst=203.0.113.10')"
block conntrack_out in_ns $FW conntrack -L
# What the host agent's health sample asks (portal_fw/offload.py), during the transfer.
block offload_listing in_ns $FW sh -c "{offload_commands}"
wait $c
# Inbound: the Internet to member 1's forward 198.51.100.5:7007 (DNAT to 10.100.0.10:7007).
in_ns $INET timeout 20 iperf3 -c 198.51.100.5 -p 7007 -t {seconds} -J > in.json &
c=$!
wait_entry 'dst=198.51.100.5 sport=' '{expect}'
echo "offload_in=$(offloaded 'dst=198.51.100.5 sport=')"
block conntrack_in in_ns $FW conntrack -L
wait $c
sleep 1
block iperf_out cat out.json
block iperf_in cat in.json
block server_out cat server_out.log
block server_in cat server_in.log
echo "offered=$(rule_counter fast_path 'fast path: flow offered to the flowtable')"
echo "acct_out=$(element_counter acct4_out 10.100.0.10)"
echo "acct_in=$(element_counter acct4_in 10.100.0.10)"
block conntrack_end in_ns $FW conntrack -L -p tcp
block ruleset in_ns $FW nft list ruleset
"""

SHAPED = f"""
load_rules . || exit 3
in_ns $INET iperf3 -s -1 -p {PROBE_PORT} > server.log 2>&1 &
sleep 1
# Member 2's download (the server sends: -R), shaped to its class on pl-cfwd.
in_ns $DORM timeout 30 iperf3 -c 203.0.113.10 -p {PROBE_PORT} -B 10.100.0.20 -R -O 1 -t {SHAPED_S} -J > down.json &
c=$!
# Once its data flows (a second entry of the device, past its control connection) and then
# for a while longer, none of its entries is offloaded.
wait_entry 'src=10.100.0.20' 'ESTABLISHED'
sleep 3
echo "shaped_entries=$(in_ns $FW conntrack -L 2>/dev/null | grep -c 'src=10.100.0.20')"
echo "offload_shaped=$(offloaded 'src=10.100.0.20')"
wait $c
block iperf_down cat down.json
block classes in_ns $FW tc -s class show dev pl-cfwd
"""

FORWARD_REMOVED = """
load_rules . || exit 3
in_ns $DORM iperf3 -s -1 -p 7007 -B 10.100.0.10 > server_gone.log 2>&1 &
in_ns $DORM iperf3 -s -1 -p 80 -B 10.100.0.10 > server_kept.log 2>&1 &
sleep 1
# Two long transfers through member 1's forwards (stopped below, once checked: a busy machine
# slows the VM down a lot); the rule set then loses the one on 7007.
in_ns $INET timeout 300 iperf3 -c 198.51.100.5 -p 7007 -t 280 -i 1 --forceflush > gone.log 2>&1 &
g=$!
in_ns $INET timeout 300 iperf3 -c 198.51.100.5 -p 8080 -t 280 -i 1 --forceflush > kept.log 2>&1 &
k=$!
wait_entry 'dport=7007 ' '[OFFLOAD]'
wait_entry 'dport=8080 ' '[OFFLOAD]'
echo "offload_gone_before=$(offloaded 'dport=7007 ')"
echo "offload_kept_before=$(offloaded 'dport=8080 ')"
# The new rule set without the forward on 7007: a full replacement, as the helper applies it.
t0=$(cut -d' ' -f1 /proc/uptime)
in_ns $FW nft -f rules2.nft
echo "reload=$?"
t1=$(cut -d' ' -f1 /proc/uptime)
echo "reload_at=$t0 $t1"
wait_entry 'dport=8080 ' '[OFFLOAD]'
sleep 1
echo "offload_gone_after=$(offloaded 'dport=7007 ')"
echo "offload_kept_after=$(offloaded 'dport=8080 ')"
block after_conntrack in_ns $FW conntrack -L
wait_ended $g
echo "gone_alive=$(kill -0 $g 2>/dev/null && echo yes || echo no)"
echo "kept_alive=$(kill -0 $k 2>/dev/null && echo yes || echo no)"
kill $k $g 2>/dev/null
t2=$(cut -d' ' -f1 /proc/uptime)
echo "checked_at=$t2"
block gone cat gone.log
block kept cat kept.log
echo "ended=$(rule_counter forward_kept 'forward removed: its connection ends')"
block after_ruleset in_ns $FW nft list ruleset
"""

FLOODS = """
load_rules . || exit 3
in_ns $DORM iperf3 -s -p 80 -B 10.100.0.10 >/dev/null 2>&1 &
sleep 1
# 300 SYNs without TCP options (hping3's plain SYN) to member 1's forward: dropped before
# conntrack by the early chain (raw priority), counted by reason.
in_ns $INET hping3 -q -S -p 8080 -c 300 -i u2000 198.51.100.5 >/dev/null 2>&1
echo "early_dropped=$(rule_counter early_tcp 'malformed: SYN without options')"
echo "early_entries=$(in_ns $FW conntrack -L -p tcp --orig-port-dst 8080 2>/dev/null | wc -l)"
# 3,000 well-formed SYNs (a timestamp option) from random sources: the forwards' quota
# ({quota} connections per member) bounds the entries the flood can create.
in_ns $INET hping3 -q -S --tcp-timestamp --rand-source -p 8080 -c 3000 -i u300 198.51.100.5 >/dev/null 2>&1
echo "quota_entries=$(in_ns $FW conntrack -L -p tcp --orig-port-dst 8080 2>/dev/null | wc -l)"
echo "quota_dropped=$(rule_counter to_members 'quota: forwarded connections')"
block quota_hit in_ns $FW nft list set inet portal_fw quota_hit4
"""

# The host agent's flowtable probe (portal_fw/probes.py): its text, on the interface it would
# pick from the site's rule set, checked with the modules unloaded (a fresh Debian host has
# them on disk, not loaded): the check loads them itself.
PROBE = """
rmmod nft_flow_offload nf_flow_table_inet nf_flow_table
echo "modules_before=$(lsmod | grep -c '^nf_flow_table')"
in_ns $FW nft -c -f probe.nft
echo "probe=$?"
echo "modules_after=$(lsmod | grep -c '^nf_flow_table_inet')"
echo "tables_after=$(in_ns $FW nft list tables | wc -l)"
modprobe nft_flow_offload
"""

# An IPv6 opening removed under an offloaded flow (member 1's device, openings tcp 2222 and
# 2230 from the Internet); the rule set then loses the one on 2222. The same as
# FORWARD_REMOVED, for IPv6 (opening_kept).
OPENING_REMOVED = """
export CT_FAMILY=ipv6
load_rules . || exit 3
in_ns $DORM iperf3 -s -1 -p 2222 -B 2001:db8:100:1::10 > server_gone.log 2>&1 &
in_ns $DORM iperf3 -s -1 -p 2230 -B 2001:db8:100:1::10 > server_kept.log 2>&1 &
sleep 1
in_ns $INET timeout 300 iperf3 -6 -c 2001:db8:100:1::10 -p 2222 -t 280 -i 1 --forceflush > gone.log 2>&1 &
g=$!
in_ns $INET timeout 300 iperf3 -6 -c 2001:db8:100:1::10 -p 2230 -t 280 -i 1 --forceflush > kept.log 2>&1 &
k=$!
wait_entry 'dport=2222 ' '[OFFLOAD]'
wait_entry 'dport=2230 ' '[OFFLOAD]'
echo "offload_gone_before=$(offloaded 'dport=2222 ')"
echo "offload_kept_before=$(offloaded 'dport=2230 ')"
in_ns $FW nft -f rules2.nft
echo "reload=$?"
wait_entry 'dport=2230 ' '[OFFLOAD]'
sleep 1
echo "offload_gone_after=$(offloaded 'dport=2222 ')"
echo "offload_kept_after=$(offloaded 'dport=2230 ')"
block after_conntrack in_ns $FW conntrack -L -f ipv6
wait_ended $g
echo "gone_alive=$(kill -0 $g 2>/dev/null && echo yes || echo no)"
echo "kept_alive=$(kill -0 $k 2>/dev/null && echo yes || echo no)"
kill $g 2>/dev/null
# Then the device itself is removed (its openings with it): its address is in no set any more,
# and the flow through 2230 ends as well (the check goes by the flow's direction).
in_ns $FW nft -f rules3.nft
echo "reload3=$?"
wait_ended $k
echo "device_gone_alive=$(kill -0 $k 2>/dev/null && echo yes || echo no)"
kill $k 2>/dev/null
block gone cat gone.log
block kept cat kept.log
echo "ended=$(rule_counter opening_kept 'opening removed: its connection ends')"
"""

# HA with the fast path: the primary ($FW) and a backup ($FW2) with the same rule set on shared
# member and Internet segments, each running the product's keepalived.conf and conntrackd.conf
# (workers/ruleset/ha.py: VRRPv3 unicast and FT-FW over UDP on pl-cfws), keepalived's notify
# hook the product's portal-ha (deploy/firewall/portal-ha, Debian's Python in the VM). A flow
# through member 1's forward is offloaded on the primary; what the backup's conntrackd holds of
# it; then the operator's failover (lab.sh `failover`: the primary's priority file -254, so its
# instance goes to FAULT): keepalived moves the gateways, portal-ha commits the backup's external
# cache. Does the flow go on, and is it offloaded there?
HA_FAILOVER = """
load_rules . || exit 3
pair_up
in_ns $FW2 tc -batch rules.tc && in_ns $FW2 nft -f rules.nft || exit 3
mkdir -p /run/ha-a /run/ha-b
in_ns $FW conntrackd -d -C $PWD/ctd-a.conf
in_ns $FW2 conntrackd -d -C $PWD/ctd-b.conf
sleep 1
stamp keepalived
in_ns $FW keepalived -P -n -l -D -f $PWD/ka-a.conf -p /run/ha-a/keepalived.pid -r /run/ha-a/vrrp.pid > ka-a.log 2>&1 &
in_ns $FW2 keepalived -P -n -l -D -f $PWD/ka-b.conf -p /run/ha-b/keepalived.pid -r /run/ha-b/vrrp.pid > ka-b.log 2>&1 &
wait_state /run/ha-a MASTER; echo "primary_master=$?"
wait_state /run/ha-b BACKUP; echo "backup_backup=$?"
stamp roles
in_ns $DORM iperf3 -s -1 -p 7007 -B 10.100.0.10 > server.log 2>&1 &
sleep 1
in_ns $INET timeout 300 iperf3 -c 198.51.100.5 -p 7007 -t 280 -i 1 --forceflush > flow.log 2>&1 &
c=$!
wait_entry 'dport=7007 ' '[OFFLOAD]'
echo "offload_primary=$(offloaded 'dport=7007 ')"
# Until the backup's external cache holds both connections as ESTABLISHED (conntrackd sends
# each state change; on a loaded host the emulated VM takes seconds for it), <= 20 s.
i=0
while [ $i -lt 40 ]; do
    ext=$(in_ns $FW2 conntrackd -C $PWD/ctd-b.conf -e 2>/dev/null | grep 'dport=7007 ')
    [ "$(echo "$ext" | grep -c ESTABLISHED)" -ge 2 ] && ! echo "$ext" | grep -qv ESTABLISHED && break
    sleep 0.5
    i=$((i + 1))
done
sleep 1
block primary_ct in_ns $FW conntrack -L
block primary_internal in_ns $FW conntrackd -C $PWD/ctd-a.conf -i
block backup_external in_ns $FW2 conntrackd -C $PWD/ctd-b.conf -e
echo "backup_has=$(in_ns $FW2 conntrackd -C $PWD/ctd-b.conf -e 2>/dev/null | grep -c 'dport=7007 ')"
before=$(grep -c 'sec ' flow.log)
# The failover, as lab.sh's `failover` does it: the primary's priority file.
stamp failover
echo -254 > /run/ha-a/priority-ipv4
wait_state /run/ha-b MASTER; echo "backup_master=$?"
stamp backup_master
# The first listing of the flow on the backup once its notify committed the external cache.
FW=$FW2 wait_entry 'dport=7007 ' 'ESTABLISHED'
block backup_ct_committed in_ns $FW2 conntrack -L
FW=$FW2 wait_entry 'dport=7007 ' '[OFFLOAD]'
stamp backup_offload
echo "offload_backup=$(FW=$FW2 offloaded 'dport=7007 ')"
wait_state /run/ha-a FAULT; echo "primary_fault=$?"
sleep 4
block backup_ct_after in_ns $FW2 conntrack -L
echo "alive=$(kill -0 $c 2>/dev/null && echo yes || echo no)"
after=$(grep -c 'sec ' flow.log)
echo "intervals_before=$before"
echo "intervals_after=$after"
echo "vip_primary=$(in_ns $FW ip -4 -o addr show | grep -c ' 10.100.0.1/16 \\| 203.0.113.1/24 ')"
echo "vip_backup=$(in_ns $FW2 ip -4 -o addr show | grep -c ' 10.100.0.1/16 \\| 203.0.113.1/24 ')"
kill $c 2>/dev/null
sleep 1
block flow cat flow.log
block notify_a cat /run/ha-a/notify.log
block notify_b cat /run/ha-b/notify.log
block backup_forward in_ns $FW2 nft list chain inet portal_fw forward
block backup_stats in_ns $FW2 conntrackd -C $PWD/ctd-b.conf -s
for ns in $FW $FW2; do for pid in $(ip netns pids $ns); do kill $pid 2>/dev/null; done; done
sleep 1
block ka_a cat ka-a.log
block ka_b cat ka-b.log
pair_down "{dorm}"
"""


def ha_configs(primary: bool) -> dict[str, str]:
    """The product's keepalived.conf and conntrackd.conf for one firewall of the VM's pair
    (the primary: sync address .1, IPv4 priority 200; the backup: .2, 100)."""
    tag, local, peer = (
        ("a", "10.255.254.1", "10.255.254.2") if primary else ("b", "10.255.254.2", "10.255.254.1")
    )
    ha = Ha(
        sync_interface="pl-cfws",
        local4=IPv4Address(local),
        peer4=IPv4Address(peer),
        priority4=200 if primary else 100,
        addresses4=(("pl-cfwd", "10.100.0.1/16"), ("pl-cfwu", "203.0.113.1/24")),
        # 1 s adverts instead of the site's default 100 ms: emulation on a busy machine stalls
        # the VM for longer than 3 x 100 ms now and then, and the backup would take over on its
        # own. The operator's failover below does not wait for adverts (priority 0 advert).
        advert_ms=1000,
        track_interfaces=("pl-cfwd", "pl-cfwu"),
        run_dir=f"/run/ha-{tag}",
        notify="/lab/portal-fw/portal-ha",
        conntrackd_config=f"/lab/cases/ha_failover/ctd-{tag}.conf",
    )
    snapshot = s.Snapshot(policy=POLICY, host=FAST, members=lab_members(), ha=ha)
    keepalived, conntrackd = keepalived_config(snapshot), conntrackd_config(snapshot)
    assert keepalived is not None
    assert conntrackd is not None
    return {f"ka-{tag}.conf": keepalived, f"ctd-{tag}.conf": conntrackd}


QUOTA_IN = 100
SETUP = f'topo "{DORM}"\n'


def with_openings(*ports: int) -> tuple[s.Member, ...]:
    """The lab's members with member 1's TCP openings on exactly `ports` (its UDP one kept)."""
    m1, *rest = lab_members()
    udp = tuple(o for o in m1.openings if o.protocol != "tcp")
    tcp = tuple(s.Opening(100 + p, 10, "tcp", p) for p in ports)
    return (dataclasses.replace(m1, openings=udp + tcp), *rest)


def without_device1() -> tuple[s.Member, ...]:
    """The lab's members with member 1's device removed (its forwards and openings with it)."""
    m1, *rest = lab_members()
    return (dataclasses.replace(m1, devices=(), forwards=(), openings=()), *rest)


def all_cases() -> list[Case]:
    """Every kernel-lab case, in the order the VM runs them."""
    flood_policy = dataclasses.replace(POLICY, conntrack_quota_in=QUOTA_IN)
    site_rules = rules()["rules.nft"]
    device = next(iter(probes.flowtable_devices(site_rules)))
    offload_commands = "; ".join(" ".join(argv) for argv in offload.COMMANDS)
    return [
        Case("flowtable_probe", PROBE, {"probe.nft": probes.flowtable_probe_text(device)}),
        Case(
            "fast_path_on",
            TRAFFIC.format(
                seconds=TRANSFER_S,
                port=PROBE_PORT,
                expect="[OFFLOAD]",
                offload_commands=offload_commands,
            ),
            rules(),
            timeout=100,
        ),
        Case(
            "fast_path_off",
            TRAFFIC.format(
                seconds=CONTROL_S,
                port=PROBE_PORT,
                expect="ESTABLISHED",
                offload_commands=offload_commands,
            ),
            rules(HOST),
            timeout=100,
        ),
        Case("shaped_download", SHAPED, rules(), timeout=100),
        Case(
            "forward_removed",
            FORWARD_REMOVED,
            {**rules(), "rules2.nft": rules(members=without_forward(7007))["rules.nft"]},
            timeout=150,
        ),
        Case(
            "opening_removed",
            OPENING_REMOVED,
            {
                **rules(members=with_openings(2222, 2230)),
                "rules2.nft": rules(members=with_openings(2230))["rules.nft"],
                "rules3.nft": rules(members=without_device1())["rules.nft"],
            },
            timeout=150,
        ),
        Case(
            "ha_failover",
            HA_FAILOVER.replace("{dorm}", DORM),
            {**rules(), **ha_configs(primary=True), **ha_configs(primary=False)},
            timeout=150,
        ),
        Case(
            "floods",
            FLOODS.format(dorm=DORM, quota=QUOTA_IN),
            rules(policy=flood_policy),
            timeout=100,
        ),
    ]
