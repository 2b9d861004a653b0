# Sourced by every kernel-lab case inside the VM (busybox sh): the firewall path of the
# compiler's lab (tests/e2e/ruleset/topology.py) in network namespaces of the VM, the same
# names and addresses, so the snapshot of tests/e2e/ruleset/scenario.py compiles for it.
#
#   pl-cinet  pl-ciu 203.0.113.10/24, 2001:db8:ffff::10/64        (Internet side)
#   pl-cfw    pl-cfwu (uplink) / pl-cfwd (member side)            (the firewall)
#   pl-cdorm  pl-cdd  device addresses 10.100.0.x/16              (member side)
#
# Results go to stdout as `key=value` lines (and fenced blocks) for the Python side to read.

# Debian's busybox shell runs its own applets before PATH: iproute2's ip and tc by full path.
ip() { /usr/sbin/ip "$@"; }
tc() { /usr/sbin/tc "$@"; }

FW=pl-cfw
INET=pl-cinet
DORM=pl-cdorm

in_ns() { ns=$1; shift; ip netns exec "$ns" "$@"; }

stamp() {  # stamp NAME : seconds since boot at this step (the case's timing)
    echo "t_$1=$(cut -d' ' -f1 /proc/uptime)"
}

topo() {  # topo "ADDR/PREFIX ..." : the three namespaces, routed as in production
    dorm_addresses=$1
    for ns in $FW $INET $DORM; do
        ip netns add $ns
        in_ns $ns ip link set lo up
        in_ns $ns sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
            net.ipv6.conf.all.accept_ra=0 >/dev/null
    done
    in_ns $FW ip link add pl-cfwu type veth peer name pl-ciu
    in_ns $FW ip link set pl-ciu netns $INET
    in_ns $FW ip link add pl-cfwd type veth peer name pl-cdd
    in_ns $FW ip link set pl-cdd netns $DORM
    for pair in "$FW pl-cfwu" "$FW pl-cfwd" "$INET pl-ciu" "$DORM pl-cdd"; do
        set -- $pair
        in_ns $1 ip link set $2 up
    done
    in_ns $FW sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 >/dev/null
    # The host's sysctl file (deploy/firewall/90-portal-firewall.conf), and conntrack's byte
    # counters so that `conntrack -L` shows what the flowtable's `counter` syncs into entries.
    in_ns $FW sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0 net.netfilter.nf_conntrack_acct=1 >/dev/null
    in_ns $FW ip addr add 203.0.113.1/24 dev pl-cfwu
    in_ns $FW ip addr add 2001:db8:ffff::1/64 dev pl-cfwu nodad
    in_ns $FW ip addr add 10.100.0.1/16 dev pl-cfwd
    in_ns $FW ip addr add 2001:db8:100:1::1/64 dev pl-cfwd nodad
    in_ns $INET ip addr add 203.0.113.10/24 dev pl-ciu
    in_ns $INET ip addr add 2001:db8:ffff::10/64 dev pl-ciu nodad
    for a in $dorm_addresses; do
        case $a in *:*) in_ns $DORM ip addr add $a dev pl-cdd nodad ;; *) in_ns $DORM ip addr add $a dev pl-cdd ;; esac
    done
    in_ns $INET ip route add 198.51.100.0/24 via 203.0.113.1
    in_ns $INET ip -6 route add 2001:db8:100::/48 via 2001:db8:ffff::1
    in_ns $DORM ip route add default via 10.100.0.1
    in_ns $DORM ip -6 route add default via 2001:db8:100:1::1
}

load_rules() {  # load_rules DIR : tc batch, then the nft transaction, as the host helper does
    stamp rules
    if [ -s "$1/rules.tc" ]; then in_ns $FW tc -batch "$1/rules.tc" || return 1; fi
    in_ns $FW nft -f "$1/rules.nft" || return 1
    stamp loaded
}

# The family `conntrack -L` lists (it lists IPv4 alone unless told): CT_FAMILY=ipv6 for IPv6.
offloaded() {  # offloaded PATTERN : conntrack entries marked [OFFLOAD] matching PATTERN
    in_ns $FW conntrack -L -f ${CT_FAMILY:-ipv4} 2>/dev/null | grep -F '[OFFLOAD]' | grep -c -- "$1"
}

wait_entry() {  # wait_entry PATTERN [TEXT] : until a conntrack line holds PATTERN (and TEXT), <= 15 s
    i=0
    while [ $i -lt 30 ]; do
        in_ns $FW conntrack -L -f ${CT_FAMILY:-ipv4} 2>/dev/null | grep -- "$1" | grep -qF -- "${2:-$1}" && return 0
        sleep 0.5
        i=$((i + 1))
    done
    return 1
}

block() {  # block NAME COMMAND... : the command's output fenced for the Python side
    echo "---- begin $1"
    shift
    "$@" 2>&1
    echo "---- end"
}

element_counter() {  # element_counter SET ADDRESS : "packets bytes" of a counted element
    in_ns $FW nft list set inet portal_fw "$1" | tr ',' '\n' \
        | sed -n "s/.*[{ ]$2 counter packets \([0-9]*\) bytes \([0-9]*\).*/\1 \2/p" | head -1
}

rule_counter() {  # rule_counter CHAIN COMMENT : "packets bytes" of the counted rule with COMMENT
    in_ns $FW nft list chain inet portal_fw "$1" | grep -F "\"$2\"" \
        | sed -n 's/.*counter packets \([0-9]*\) bytes \([0-9]*\).*/\1 \2/p' | head -1
}

reset_lab() {  # between cases: no process, rule set, shaper or conntrack entry is left
    for ns in $FW $INET $DORM; do
        for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null; done
    done
    in_ns $FW nft delete table inet portal_fw 2>/dev/null
    in_ns $FW nft delete table ip portal_nat 2>/dev/null
    for dev in pl-cfwu pl-cfwd; do in_ns $FW tc qdisc del dev $dev root 2>/dev/null; done
    in_ns $FW conntrack -F 2>/dev/null
    in_ns $FW conntrack -F -f ipv6 2>/dev/null
    return 0
}

teardown() {  # every namespace and the processes in it
    for ns in $(ip netns list | cut -d' ' -f1); do
        for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns"
    done
}

FW2=pl-cfw2

pair_up() {  # the HA pair: a second firewall (the backup) beside $FW on the same segments
    # Member side and Internet side become one segment each (a bridge in pl-cdorm and in
    # pl-cinet, with each firewall's link as a port), so that the gateways 10.100.0.1 and
    # 203.0.113.1 are virtual addresses keepalived moves; each firewall keeps an address of
    # its own (.2 / .3). A sync link pl-cfws joins the firewalls (10.255.254.1 / .2).
    ip netns add $FW2
    in_ns $FW2 ip link set lo up
    in_ns $FW2 sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
        net.netfilter.nf_conntrack_tcp_loose=0 net.netfilter.nf_conntrack_acct=1 >/dev/null
    in_ns $FW2 ip link add pl-cfwu type veth peer name pl-ciu2
    in_ns $FW2 ip link set pl-ciu2 netns $INET
    in_ns $FW2 ip link add pl-cfwd type veth peer name pl-cdd2
    in_ns $FW2 ip link set pl-cdd2 netns $DORM
    in_ns $FW ip link add pl-cfws type veth peer name pl-cfws2
    in_ns $FW ip link set pl-cfws2 netns $FW2
    in_ns $FW2 ip link set pl-cfws2 name pl-cfws
    for side in "$DORM pl-cdbr pl-cdd pl-cdd2" "$INET pl-cibr pl-ciu pl-ciu2"; do
        set -- $side
        in_ns $1 ip link add $2 type bridge
        in_ns $1 ip link set $3 master $2
        in_ns $1 ip link set $4 master $2
        in_ns $1 ip link set $4 up
        in_ns $1 ip link set $2 up
    done
    dorm4=$(ha_dorm4)
    in_ns $DORM ip -4 addr flush dev pl-cdd
    for a in $dorm4; do in_ns $DORM ip addr add $a dev pl-cdbr; done
    in_ns $DORM ip route replace default via 10.100.0.1 dev pl-cdbr
    in_ns $INET ip -4 addr flush dev pl-ciu
    in_ns $INET ip addr add 203.0.113.10/24 dev pl-cibr
    in_ns $INET ip route replace 198.51.100.0/24 via 203.0.113.1 dev pl-cibr
    in_ns $FW ip addr del 10.100.0.1/16 dev pl-cfwd
    in_ns $FW ip addr del 203.0.113.1/24 dev pl-cfwu
    for pair in "$FW 2" "$FW2 3"; do
        set -- $pair
        in_ns $1 ip addr add 10.100.0.$2/16 dev pl-cfwd
        in_ns $1 ip addr add 203.0.113.$2/24 dev pl-cfwu
    done
    for pair in "$FW2 pl-cfwu" "$FW2 pl-cfwd" "$FW2 pl-cfws" "$FW pl-cfws"; do
        set -- $pair
        in_ns $1 ip link set $2 up
    done
    in_ns $FW ip addr add 10.255.254.1/24 dev pl-cfws
    in_ns $FW2 ip addr add 10.255.254.2/24 dev pl-cfws
}

ha_dorm4() {  # the member side's IPv4 device addresses (as topo put them on pl-cdd)
    in_ns $DORM ip -4 -o addr show dev pl-cdd | sed -n 's/.* inet \([0-9./]*\) .*/\1/p'
}

ha_state() {  # ha_state RUN_DIR : the VRRP state portal-ha's notify recorded for IPv4
    sed -n 's/.*"state": "\([A-Z]*\)".*/\1/p' "$1/state-ipv4.json" 2>/dev/null
}

wait_ended() {  # wait_ended PID : until the process has ended, <= 20 s (a reset flow's client
    # notices with its next send; under a loaded host's emulation that takes seconds)
    i=0
    while kill -0 $1 2>/dev/null && [ $i -lt 40 ]; do
        sleep 0.5
        i=$((i + 1))
    done
}

wait_state() {  # wait_state RUN_DIR STATE : until portal-ha recorded STATE, <= 30 s
    i=0
    while [ $i -lt 120 ]; do
        [ "$(ha_state $1)" = "$2" ] && return 0
        sleep 0.25
        i=$((i + 1))
    done
    return 1
}

pair_down() {  # the pair gone: every namespace rebuilt as topo made it (DORM addresses: $1)
    teardown
    topo "$1"
}
