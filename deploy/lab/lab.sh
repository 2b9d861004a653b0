#!/usr/bin/env bash
# The lab: network namespaces on this machine that behave like the dorm network.
#
#   pl-nat1, pl-nat2   firewall hosts; each runs its own sshd on the management network, where the
#                      portal's key may only run deploy/firewall/portal-fw (forced command)
#   pl-dorm            member side: bridge br0, the gateway (10.100.0.1, 2001:db8:100::1) is on the
#                      active firewall; demo device addresses live here (device-add / device-del)
#   pl-inet            Internet side: bridge br0, client 203.0.113.10 and 2001:db8:ffff::10; the
#                      public pool 198.51.100.0/24 is routed to the active IPv4 firewall, member
#                      IPv6 2001:db8:100::/48 to the active IPv6 firewall
#   pl-mgmt            root-namespace bridge 10.255.255.1/28 <-> pl-nat1 .11, pl-nat2 .12 (a /28,
#                      not /24: the machine's resolver 10.255.255.53 must stay reachable)
#   pl-sync            the pair's state-sync link, a veth between the hosts: 10.255.254.1/30 and
#                      fdff:255:254::1/64 on pl-nat1, .2 and ::2 on pl-nat2 (nothing is ever
#                      forwarded onto it): keepalived's VRRP adverts (unicast) and conntrackd
#
# Each host runs keepalived (VRRPv3, 100 ms adverts) and conntrackd (FT-FW) with the configs of
# deploy/lab/ha_bootstrap.py until the portal pushes its own (the same generator). The roles
# (IPv4 primary pl-nat1, IPv6 primary pl-nat2) are VRRP's: lab.sh only changes priorities
# through keepalived's track files (var/lab/<host>/ha/priority-ipv4|ipv6) or takes links down.
#
# Nothing but the connected management /28 is routed from the root namespace.  Keys, sshd
# configs, pid files and the firewall helper's per-host state live in <repo>/var/lab/.
#
# Usage: lab.sh up | down | status | check
#        lab.sh device-add ADDR... | device-del ADDR... | devices
#        lab.sh failover nat1|nat2   (that host gives up its roles: VRRP priority -> FAULT)
#        lab.sh failback             (priorities back: IPv4 on pl-nat1, IPv6 on pl-nat2; planned
#                                     moves also flush the neighbours' ARP caches)
#        lab.sh host-down nat1|nat2  (that host's member/Internet links go down; VRRP moves the
#                                     roles; waits until the peer holds them)
#        lab.sh host-up nat1|nat2    (links back up; the host takes its role back after the
#                                     preempt delay, 2 s)
#        lab.sh sync-down | sync-up  (cut or restore the sync link: split brain)
#        lab.sh ha-status nat1|nat2  (VRRP states and conntrackd statistics, JSON)
#        lab.sh sshd-stop nat1|nat2, lab.sh sshd-start nat1|nat2
#        lab.sh role ipv4|ipv6 nat1|nat2
#        lab.sh ssh nat1|nat2 VERB...  (runs the portal's SSH command line; for humans)
#        lab.sh client MAC      (a device namespace on the member side with that MAC; a real DHCP
#                               client leases; prints the IPv4 address, or "no lease" and exit 1)
#        lab.sh client-renew MAC | client-down MAC | clients
#        lab.sh portal-proxy PORT  (the portal as the Internet side sees it: 203.0.113.80:80 in
#                               pl-inet -> 127.0.0.1:PORT, with X-Forwarded-For)
#        lab.sh kea-restart nat1|nat2 | kea-stop nat1|nat2
#        lab.sh unbound-restart nat1|nat2 | unbound-stop nat1|nat2
#
# DNS: pl-inet runs an authoritative server for the test zone `example.` (Unbound with local
# data, 203.0.113.53: www.example -> 203.0.113.10); each firewall host runs Unbound (the
# members' resolver; the portal's bundle carries its configuration, artefact `unbound`) and a
# device namespace gets /etc/netns/<ns>/resolv.conf from its lease (dhclient-script).
#        lab.sh status-web DIR  (the off-site status page's web host: namespace pl-status on the
#                               Internet side, http://203.0.113.30/ from pl-inet, nginx with
#                               deploy/nginx/status-offsite.conf serving DIR) | status-web-down
set -euo pipefail
# The daemons started here (Kea, Unbound, portal-ra, ...) must not inherit a caller's lock file
# (`flock /tmp/pl-lab.lock lab.sh up`): they would hold the lab lock for as long as they run.
for _fd in /proc/$$/fd/*; do
	_fd=${_fd##*/}
	if [[ $_fd =~ ^[0-9]+$ ]] && ((_fd > 2 && _fd != 255)); then eval "exec $_fd>&-" 2>/dev/null || true; fi
done

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
LAB_VAR="$REPO_ROOT/var/lab"
# The host side is installed as on a real host (deploy/firewall/install.sh) into a root-owned
# directory: keepalived runs no script from a path others may write, and the checkout may live
# under a world-writable directory (a CI clone in /tmp). `lab.sh up` installs it again.
FW_LIB=/run/portal-lab/lib # the package and the entry points (deploy/firewall/install.sh --lib)
FW_SBIN=/run/portal-lab # the entry points, linked as /usr/local/sbin's on a host
FW_HELPER="$FW_LIB/portal-fw"
PYTHON=/usr/bin/python3

NAT_HOSTS=(pl-nat1 pl-nat2)
NAMESPACES=(pl-nat1 pl-nat2 pl-dorm pl-inet pl-probe)
MGMT_BRIDGE=pl-mgmt
MGMT_ROOT_ADDR=10.255.255.1/28  # /28: the machine's resolver 10.255.255.53 stays reachable
declare -A MGMT_ADDR=([pl-nat1]=10.255.255.11 [pl-nat2]=10.255.255.12 [pl-probe]=10.255.255.13)
PROBE=pl-probe # an Internet host the portal reaches by SSH: "test my forward" (deploy/probe)
PROBE_HELPER="$REPO_ROOT/deploy/probe/portal-probe"
declare -A HOST_NUM=([pl-nat1]=2 [pl-nat2]=3)

# Addresses that follow the active firewall of each family (gateway and upstream next hop).
VIP4=("dorm0 10.100.0.1/16" "inet0 203.0.113.1/24")
VIP6=("dorm0 2001:db8:100::1/48" "inet0 2001:db8:ffff::1/64" "dorm0 fe80::1/64")

log() { printf 'lab.sh: %s\n' "$*" >&2; }
die() {
	printf 'lab.sh: ERROR: %s\n' "$*" >&2
	exit 1
}

need_root() {
	[[ $EUID -eq 0 ]] || die "must run as root (network namespaces)"
	local tool
	for tool in ip nft tc sshd ssh-keygen "$PYTHON"; do
		command -v "$tool" >/dev/null 2>&1 || [[ -x $tool ]] || [[ -x /usr/sbin/$tool ]] ||
			die "missing tool: $tool (apt-get install iproute2 nftables openssh-server python3)"
	done
	[[ $REPO_ROOT != *[[:space:]\"\',]* ]] || die "the repository path may not contain spaces, quotes or commas: $REPO_ROOT"
}

ns_exists() { [[ -e /run/netns/$1 ]]; }
root_link_exists() { ip link show dev "$1" >/dev/null 2>&1; }
ns_link_exists() { ip -n "$1" link show dev "$2" >/dev/null 2>&1; }
ns_sysctl() {
	local ns=$1
	shift
	ip netns exec "$ns" sysctl -qw "$@" >/dev/null
}
short() { echo "${1#pl-}"; } # pl-nat1 -> nat1
host_arg() {
	case "$1" in
	nat1 | pl-nat1) echo pl-nat1 ;;
	nat2 | pl-nat2) echo pl-nat2 ;;
	*) die "unknown firewall host '$1' (nat1 or nat2)" ;;
	esac
}
other_host() { if [[ $1 == pl-nat1 ]]; then echo pl-nat2; else echo pl-nat1; fi; }

check_overlap() {
	"$PYTHON" "$SCRIPT_DIR/overlap_check.py"
}

# ---------------------------------------------------------------------------------- keys/sshd
ensure_keys() {
	mkdir -p "$LAB_VAR"
	chmod 700 "$LAB_VAR"
	if [[ ! -f $LAB_VAR/portal_ed25519 ]]; then
		ssh-keygen -q -t ed25519 -N '' -C "portal@lab" -f "$LAB_VAR/portal_ed25519"
	fi
	local host
	: >"$LAB_VAR/known_hosts.tmp"
	for host in "${NAT_HOSTS[@]}" "$PROBE"; do
		mkdir -p "$LAB_VAR/$host/fw"
		chmod 700 "$LAB_VAR/$host" "$LAB_VAR/$host/fw"
		if [[ ! -f $LAB_VAR/$host/ssh_host_ed25519_key ]]; then
			ssh-keygen -q -t ed25519 -N '' -C "$host" -f "$LAB_VAR/$host/ssh_host_ed25519_key"
		fi
		# Pinned by address and by name (the portal may use either with HostKeyAlias).
		printf '%s,%s %s\n' "${MGMT_ADDR[$host]}" "$host" \
			"$(cut -d' ' -f1-2 "$LAB_VAR/$host/ssh_host_ed25519_key.pub")" >>"$LAB_VAR/known_hosts.tmp"
	done
	mv "$LAB_VAR/known_hosts.tmp" "$LAB_VAR/known_hosts"
}

write_sshd_files() {
	local host=$1 dir="$LAB_VAR/$1"
	cat >"$dir/sshd_config" <<EOF
# Generated by deploy/lab/lab.sh for $host: key-only root login, forced command only.
ListenAddress ${MGMT_ADDR[$host]}:22
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin forced-commands-only
AllowUsers root
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The checkout may live under a world-writable directory (a CI clone in /tmp); the files
# themselves are root-owned 0600 under var/lab, so the ancestor check adds nothing here.
StrictModes no
PermitUserEnvironment no
# sshd runs the forced command through root's login shell; Debian's bash reads ~/.bashrc when
# sshd starts it at SHLVL 0. Root's ~/.bashrc here is this machine's (a developer's: pyenv init
# costs ~0.15 s per call), not a firewall host's: skip it so a round trip costs what it does
# on a firewall.
SetEnv SHLVL=1
PermitTTY no
AllowTcpForwarding no
AllowStreamLocalForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
GatewayPorts no
PrintMotd no
UseDNS no
LoginGraceTime 10
MaxStartups 50:30:100
ClientAliveInterval 15
ClientAliveCountMax 2
LogLevel VERBOSE
EOF
	local command
	if [[ $host == "$PROBE" ]]; then # may probe the public pool and the members' IPv6 only
		command="$PYTHON $PROBE_HELPER --allow 198.51.100.0/24 --allow 2001:db8:100::/48"
	else
		command="$FW_HELPER --state-dir $dir/fw --host-name $host --artefacts $dir/artefacts.json --ha-run-dir $dir/ha"
	fi
	printf 'command="%s",from="%s",restrict %s\n' "$command" "${MGMT_ROOT_ADDR%/*}" \
		"$(cut -d' ' -f1-2 "$LAB_VAR/portal_ed25519.pub") portal@lab" >"$dir/authorized_keys"
	chmod 600 "$dir/authorized_keys" "$dir/sshd_config"
}

pid_alive() { # a zombie (this machine's init reaps slowly) counts as dead
	local state
	state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
	[[ -n $state && $state != Z ]]
}

sshd_sessions() { # HOST: the sshd processes serving connections inside the host's namespace
	local pid comm
	for pid in $(ip netns pids "$1" 2>/dev/null || true); do
		comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
		[[ $comm == sshd || $comm == sshd-session ]] && echo "$pid"
	done
	return 0
}

sshd_pid() {
	local pidfile="$LAB_VAR/$1/sshd.pid" pid
	[[ -f $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == sshd ]] || return 1
	pid_alive "$pid" || return 1
	echo "$pid"
}

start_sshd() {
	local host=$1
	if sshd_pid "$host" >/dev/null; then
		return 0
	fi
	mkdir -p /run/sshd # privilege separation directory of Debian's sshd
	chmod 755 /run/sshd
	ip netns exec "$host" /usr/sbin/sshd -f "$LAB_VAR/$host/sshd_config" -E "$LAB_VAR/$host/sshd.log"
}

wait_sshd() {
	local host=$1 _
	for _ in $(seq 50); do
		if timeout 1 bash -c "exec 3<>/dev/tcp/${MGMT_ADDR[$host]}/22" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	die "sshd of $host does not answer on ${MGMT_ADDR[$host]}:22 (see $LAB_VAR/$host/sshd.log)"
}

# ------------------------------------------------------------------------------------ topology
make_ns() {
	local ns=$1
	ns_exists "$ns" || ip netns add "$ns"
	ns_sysctl "$ns" net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
		net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0 \
		net.ipv4.conf.all.promote_secondaries=1 net.ipv4.conf.default.promote_secondaries=1 \
		net.ipv6.conf.all.keep_addr_on_down=1 net.ipv6.conf.default.keep_addr_on_down=1
	ip -n "$ns" link set lo up
}

make_bridge() { # ns name
	ns_link_exists "$1" "$2" || ip -n "$1" link add "$2" type bridge
	ip -n "$1" link set "$2" up
}

link_to_bridge() { # fw-host fw-ifname side-ns
	local host=$1 ifname=$2 side=$3 port
	port=$(short "$host")
	if ! ns_link_exists "$host" "$ifname"; then
		ip -n "$side" link del "$port" 2>/dev/null || true
		ip -n "$host" link add "$ifname" type veth peer name "$port" netns "$side"
	fi
	ip -n "$side" link set "$port" master br0 up
	ip -n "$host" link set "$ifname" up
}

make_mgmt() {
	if ! root_link_exists "$MGMT_BRIDGE"; then
		ip link add "$MGMT_BRIDGE" type bridge
	fi
	sysctl -qw "net.ipv6.conf.$MGMT_BRIDGE.disable_ipv6=1" >/dev/null
	ip addr replace "$MGMT_ROOT_ADDR" dev "$MGMT_BRIDGE"
	ip link set "$MGMT_BRIDGE" up
	local host port
	for host in "${NAT_HOSTS[@]}" "$PROBE"; do
		port="pl-m-$(short "$host")"
		if ! ns_link_exists "$host" mgmt0; then
			root_link_exists "$port" && ip link del "$port"
			ip link add "$port" type veth peer name mgmt0 netns "$host"
		fi
		sysctl -qw "net.ipv6.conf.$port.disable_ipv6=1" >/dev/null
		ip link set "$port" master "$MGMT_BRIDGE" up
		ns_sysctl "$host" net.ipv6.conf.mgmt0.disable_ipv6=1
		ip -n "$host" addr replace "${MGMT_ADDR[$host]}/28" dev mgmt0
		ip -n "$host" link set mgmt0 up
	done
}

make_fw_links() { # the firewall host's member side and Internet side, addresses and routes
	local host=$1 n=${HOST_NUM[$1]}
	ns_sysctl "$host" net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
	# No pickup of mid-stream TCP: an unknown ACK is invalid, not a new entry (ACK floods);
	# connections survive a failover through conntrackd's state sync instead.
	modprobe nf_conntrack 2>/dev/null || true
	ns_sysctl "$host" net.netfilter.nf_conntrack_tcp_loose=0
	link_to_bridge "$host" dorm0 pl-dorm
	link_to_bridge "$host" inet0 pl-inet
	ip -n "$host" addr replace "10.100.0.$n/16" dev dorm0
	ip -n "$host" addr replace "2001:db8:100::$n/48" dev dorm0 nodad
	ip -n "$host" addr replace "203.0.113.$n/24" dev inet0
	ip -n "$host" addr replace "2001:db8:ffff::$n/64" dev inet0 nodad
	ip -n "$host" route replace default via 203.0.113.254 dev inet0
	ip -n "$host" -6 route replace default via 2001:db8:ffff::fe dev inet0
}

make_sync_link() { # the pair's dedicated state-sync link (conntrackd): pl-sync on both hosts
	if ! ns_link_exists pl-nat1 pl-sync; then
		ip -n pl-nat2 link del pl-sync 2>/dev/null || true
		ip -n pl-nat1 link add pl-sync type veth peer name pl-sync netns pl-nat2
	fi
	ns_sysctl pl-nat1 net.ipv6.conf.pl-sync.disable_ipv6=0
	ns_sysctl pl-nat2 net.ipv6.conf.pl-sync.disable_ipv6=0
	ip -n pl-nat1 addr replace 10.255.254.1/30 dev pl-sync
	ip -n pl-nat2 addr replace 10.255.254.2/30 dev pl-sync
	ip -n pl-nat1 addr replace fdff:255:254::1/64 dev pl-sync nodad
	ip -n pl-nat2 addr replace fdff:255:254::2/64 dev pl-sync nodad
	ip -n pl-nat1 link set pl-sync up
	ip -n pl-nat2 link set pl-sync up
}

make_topology() {
	local ns host n
	for ns in "${NAMESPACES[@]}"; do make_ns "$ns"; done
	make_bridge pl-dorm br0
	make_bridge pl-inet br0
	make_mgmt
	for host in "${NAT_HOSTS[@]}"; do make_fw_links "$host"; done
	make_sync_link
	# Member side: the switch itself has .254/::fe; devices get /32 and /128 on br0.
	ip -n pl-dorm addr replace 10.100.0.254/16 dev br0
	ip -n pl-dorm addr replace 2001:db8:100::fe/48 dev br0 nodad
	ip -n pl-dorm route replace default via 10.100.0.1 dev br0
	ip -n pl-dorm -6 route replace default via 2001:db8:100::1 dev br0
	# Internet side: the client first (primary), then the upstream router the firewalls use.
	ip -n pl-inet addr replace 203.0.113.10/24 dev br0
	ip -n pl-inet addr replace 203.0.113.254/24 dev br0
	ip -n pl-inet addr replace 2001:db8:ffff::10/64 dev br0 nodad
	ip -n pl-inet addr replace 2001:db8:ffff::fe/64 dev br0 nodad
	ip -n pl-inet route replace 198.51.100.0/24 via 203.0.113.1 dev br0 src 203.0.113.10
	ip -n pl-inet -6 route replace 2001:db8:100::/48 via 2001:db8:ffff::1 dev br0 src 2001:db8:ffff::10
	# The ISP routes its member side internally: the portal (203.0.113.80, lab.sh portal-proxy)
	# answers unregistered devices, whose registration addresses are not NATed. The firewall
	# still lets nothing from here reach a device unasked (to_members).
	ip -n pl-inet route replace 10.100.0.0/16 via 203.0.113.1 dev br0
	make_probe_links
}

make_probe_links() { # pl-probe: an Internet host (203.0.113.20) that routes nothing itself
	ns_sysctl "$PROBE" net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
	if ! ns_link_exists "$PROBE" inet0; then
		ip -n pl-inet link del probe 2>/dev/null || true
		ip -n "$PROBE" link add inet0 type veth peer name probe netns pl-inet
	fi
	ip -n pl-inet link set probe master br0 up
	ip -n "$PROBE" link set inet0 up
	ip -n "$PROBE" addr replace 203.0.113.20/24 dev inet0
	ip -n "$PROBE" addr replace 2001:db8:ffff::20/64 dev inet0 nodad
	ip -n "$PROBE" route replace 198.51.100.0/24 via 203.0.113.1 dev inet0
	ip -n "$PROBE" -6 route replace 2001:db8:100::/48 via 2001:db8:ffff::1 dev inet0
}

# --------------------------------------------------------------------------------------- roles
# keepalived holds the virtual addresses; lab.sh moves them only through VRRP priorities.
HA_NOTIFY="$FW_SBIN/portal-ha"
ha_dir() { echo "$LAB_VAR/$1/ha"; }

install_host_side() { # the package and its entry points, as deploy/install.sh firewall does
	mkdir -p /run/portal-lab
	chmod 755 /run/portal-lab
	bash "$REPO_ROOT/deploy/firewall/install.sh" --lib "$FW_LIB" --sbin "$FW_SBIN" --state "" \
		--python "$PYTHON" >/dev/null
}

write_ha_files() {
	local host=$1 dir
	dir=$(ha_dir "$host")
	mkdir -p "$dir"
	chmod 755 "$dir"
	"$PYTHON" "$SCRIPT_DIR/ha_bootstrap.py" "${host#pl-nat}" "$dir" "$HA_NOTIFY"
	[[ -f $dir/priority-ipv4 ]] || echo 0 >"$dir/priority-ipv4"
	[[ -f $dir/priority-ipv6 ]] || echo 0 >"$dir/priority-ipv6"
}

start_ha() { # conntrackd first (keepalived's notify drives it), then keepalived
	local host=$1 dir
	dir=$(ha_dir "$host")
	command -v keepalived >/dev/null 2>&1 || die "missing tool: keepalived (apt-get install keepalived)"
	command -v conntrackd >/dev/null 2>&1 || die "missing tool: conntrackd (apt-get install conntrackd)"
	ip netns exec "$host" "$HA_NOTIFY" reload-conntrackd "$dir/conntrackd.conf" "$dir" ||
		die "conntrackd of $host did not start (see $dir/conntrackd.log)"
}

keepalived_pid() { # HOST -> keepalived's pid when it runs
	local pid
	pid=$(cat "$(ha_dir "$1")/keepalived.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == keepalived ]] && echo "$pid"
}

start_keepalived() { # both hosts right after each other: the first election needs no preemption
	local host dir
	for host in "$@"; do
		keepalived_pid "$host" >/dev/null && continue
		dir=$(ha_dir "$host")
		ip netns exec "$host" "$HA_NOTIFY" reload-keepalived "$dir/keepalived.conf" "$dir" ||
			die "keepalived of $host did not start"
	done
}

vip_holder() { # ADDRESS/PREFIX IFNAME -> the host that holds it (or nothing)
	local host
	for host in "${NAT_HOSTS[@]}"; do
		# Not grep -q: it would stop reading at the first match, ip (which flushes each line)
		# would die of SIGPIPE, and pipefail would call a held address missing, now and then.
		if ip -n "$host" -o addr show dev "$2" 2>/dev/null | grep -F " $1 " >/dev/null; then
			echo "$host"
			return 0
		fi
	done
}

roles_are() { # V4HOST V6HOST: every virtual address is on its host and nowhere else
	local item ifname addr count
	for item in "${VIP4[@]}"; do
		read -r ifname addr <<<"$item"
		[[ "$(vip_holder "$addr" "$ifname")" == "$1" ]] || return 1
		count=$(for h in "${NAT_HOSTS[@]}"; do ip -n "$h" -o addr show dev "$ifname" 2>/dev/null; done | grep -cF " $addr " || true)
		[[ $count -eq 1 ]] || return 1
	done
	for item in "${VIP6[@]}"; do
		read -r ifname addr <<<"$item"
		[[ "$(vip_holder "$addr" "$ifname")" == "$2" ]] || return 1
	done
}

wait_roles() { # V4HOST V6HOST SECONDS
	local deadline=$((SECONDS + $3))
	while ((SECONDS <= deadline)); do
		roles_are "$1" "$2" && return 0
		sleep 0.05
	done
	die "VRRP did not settle to IPv4 on $1, IPv6 on $2 within $3 s (lab.sh ha-status nat1|nat2)"
}

roles_settle() { # V4HOST V6HOST SECONDS: as roles_are, held for a second of wall time; 1 if not
	# (a keepalived that just started drops the addresses it finds, then takes them again)
	local deadline=$((SECONDS + $3)) since="" now
	while ((SECONDS <= deadline)); do
		now=$(date +%s%N)
		if roles_are "$1" "$2"; then
			[[ -n $since ]] || since=$now
			((now - since >= 1000000000)) && return 0
		else
			since=""
		fi
		sleep 0.1
	done
	return 1
}

wait_roles_stable() { # V4HOST V6HOST SECONDS
	roles_settle "$@" && return 0
	ha_diagnosis
	die "VRRP did not settle to IPv4 on $1, IPv6 on $2 within $3 s (lab.sh ha-status nat1|nat2)"
}

ha_diagnosis() { # to stderr: what each host's VRRP sees, for a failure's report
	local host dir pid item ifname addr
	for item in "${VIP4[@]}" "${VIP6[@]}"; do
		read -r ifname addr <<<"$item"
		log "diagnosis: $addr on $ifname of: $(for host in "${NAT_HOSTS[@]}"; do
			ip -n "$host" -o addr show dev "$ifname" 2>/dev/null | grep -F " $addr " | sed "s/^/$host: /"
		done | tr -s ' ' | tr '\n' ';')"
	done
	for host in "${NAT_HOSTS[@]}"; do
		dir=$(ha_dir "$host")
		log "diagnosis $host: processes: $(for pid in $(ip netns pids "$host" 2>/dev/null); do
			printf '%s:%s ' "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null)"
		done)"
		log "diagnosis $host: links: $(ip -n "$host" -br link 2>/dev/null | tr -s ' ' | tr '\n' ';')"
		for item in "${VIP4[@]}" "${VIP6[@]}"; do
			read -r ifname addr <<<"$item"
			ip -n "$host" -o addr show dev "$ifname" 2>/dev/null | grep -F " $addr " >/dev/null && log "diagnosis $host: holds $addr"
		done
		log "diagnosis $host: priorities $(cat "$dir/priority-ipv4" "$dir/priority-ipv6" 2>/dev/null | tr '\n' ' ')"
		log "diagnosis $host: status $(ip netns exec "$host" "$HA_NOTIFY" status "$dir/conntrackd.conf" "$dir" 2>&1 | head -c 1500)"
		log "diagnosis $host: notify.log: $(tail -n 8 "$dir/notify.log" 2>/dev/null | tr '\n' ';')"
		log "diagnosis $host: keepalived.log (no ARP/NA lines): $(grep -v 'gratuitous ARP\|Neighbour Advert' "$dir/keepalived.log" 2>/dev/null | tail -n 40 | cut -c1-160 | tr '\n' ';')"
	done
}

flush_neighbours() { # after a planned move: no neighbour waits out its ARP lock time
	local ns
	for ns in pl-dorm pl-inet; do
		ip -n "$ns" neigh flush dev br0 2>/dev/null || true
		ip -n "$ns" -6 neigh flush dev br0 2>/dev/null || true
	done
	for ns in $(client_namespaces); do
		ip -n "$ns" neigh flush dev eth0 2>/dev/null || true
	done
}

set_priority() { # HOST FAMILY VALUE: keepalived's track file (weight 1; -254 = FAULT)
	local file
	file="$(ha_dir "$1")/priority-$2"
	echo "$3" >"$file.tmp"
	mv "$file.tmp" "$file"
}

read_role() { # ipv4|ipv6 -> pl-natX: the host holding that family's gateway
	if [[ $1 == ipv4 ]]; then vip_holder 10.100.0.1/16 dorm0; else vip_holder 2001:db8:100::1/48 dorm0; fi
}

cmd_role() { # the other host's instance of that family is lowered below this one's
	local fam=${1:-} host other
	[[ $fam == ipv4 || $fam == ipv6 ]] || die "usage: lab.sh role ipv4|ipv6 nat1|nat2"
	host=$(host_arg "${2:-}")
	other=$(other_host "$host")
	lab_is_up || die "the lab is not up"
	set_priority "$host" "$fam" 0
	set_priority "$other" "$fam" -150
	if [[ $fam == ipv4 ]]; then wait_roles "$host" "$(read_role ipv6)" 10; else wait_roles "$(read_role ipv4)" "$host" 10; fi
	flush_neighbours
	log "$fam now on $host"
}

cmd_failover() { # the host gives up every role (its instances go to FAULT)
	local failed peer
	failed=$(host_arg "${1:-}")
	peer=$(other_host "$failed")
	lab_is_up || die "the lab is not up"
	set_priority "$failed" ipv4 -254
	set_priority "$failed" ipv6 -254
	set_priority "$peer" ipv4 0
	set_priority "$peer" ipv6 0
	wait_roles "$peer" "$peer" 5
	flush_neighbours
	log "$failed failed over: IPv4 and IPv6 now on $peer"
}

cmd_failback() {
	local host
	lab_is_up || die "the lab is not up"
	for host in "${NAT_HOSTS[@]}"; do
		set_priority "$host" ipv4 0
		set_priority "$host" ipv6 0
	done
	wait_roles pl-nat1 pl-nat2 15
	flush_neighbours
	log "production roles: IPv4 on pl-nat1, IPv6 on pl-nat2"
}

link_is_up() { # ns ifname
	ip -n "$1" -o link show dev "$2" 2>/dev/null | grep -q '[<,]UP[,>]'
}

cmd_host_down() { # the host's data links go down: VRRP (tracked interfaces) moves its roles
	local host peer t0
	host=$(host_arg "${1:-}")
	peer=$(other_host "$host")
	lab_is_up || die "the lab is not up"
	t0=$(date +%s%N)
	ip -n "$host" link set dorm0 down
	ip -n "$host" link set inet0 down
	if ! link_is_up "$peer" dorm0; then # the whole pair is down: nobody can take over
		log "$host: member and Internet links down; $peer is down too: no host serves the site (lab.sh host-up nat1 / nat2 bring them back)"
		return 0
	fi
	wait_roles "$peer" "$peer" 5
	log "$host: member and Internet links down; $peer took over in $((($(date +%s%N) - t0) / 1000000)) ms (lab.sh host-up $(short "$host") brings them back)"
}

cmd_host_up() { # links back; VRRP gives the host its role back after the preempt delay
	local host
	host=$(host_arg "${1:-}")
	lab_is_up || die "the lab is not up"
	make_fw_links "$host"
	start_kea "$host"
	start_ra "$host"
	start_unbound "$host"
	log "$host: links up (it takes its roles back after the preempt delay; lab.sh failback waits for it)"
}

cmd_sync_link() { # down|up: the sync link (VRRP adverts and conntrackd) cut: split brain
	lab_is_up || die "the lab is not up"
	ip -n pl-nat1 link set pl-sync "$1"
	ip -n pl-nat2 link set pl-sync "$1"
	log "sync link $1"
}

cmd_ha_status() {
	local host dir
	host=$(host_arg "${1:-}")
	dir=$(ha_dir "$host")
	ip netns exec "$host" "$HA_NOTIFY" status "$dir/conntrackd.conf" "$dir"
}

cmd_sshd() { # stop|start HOST
	local op=$1 host pid
	host=$(host_arg "${2:-}")
	if [[ $op == stop ]]; then
		pid=$(sshd_pid "$host" || true)
		# The listener and the sessions it serves (the portal keeps its connections open
		# between pushes): the host is gone for SSH, as when it is down.
		# shellcheck disable=SC2086
		kill_pids $pid $(sshd_sessions "$host")
		rm -f "$LAB_VAR/$host/sshd.pid"
		log "sshd of $host stopped"
	else
		ns_exists "$host" || die "the lab is not up"
		start_sshd "$host"
		wait_sshd "$host"
		log "sshd of $host running"
	fi
}

# ------------------------------------------------------------------------------------- devices
validate_device_addr() { # in the member ranges, and not a gateway/firewall/switch address
	"$PYTHON" - "$1" <<'EOF'
import ipaddress, sys
a = ipaddress.ip_address(sys.argv[1])
net = ipaddress.ip_network("10.100.0.0/16" if a.version == 4 else "2001:db8:100::/48")
reserved = {"10.100.0.1", "10.100.0.2", "10.100.0.3", "10.100.0.254",
            "2001:db8:100::1", "2001:db8:100::2", "2001:db8:100::3", "2001:db8:100::fe"}
sys.exit(0 if a in net and str(a) not in reserved and a != net.network_address else 1)
EOF
}

cmd_device() { # add|del ADDR...
	local op=$1 addr ns
	shift
	[[ $# -gt 0 ]] || die "usage: lab.sh device-$op ADDR... (10.100.0.0/16, 2001:db8:100::/48)"
	lab_is_up || die "the lab is not up"
	for addr in "$@"; do
		validate_device_addr "$addr" 2>/dev/null ||
			die "not a device address of the lab: '$addr' (10.100.0.0/16 or 2001:db8:100::/48, not a gateway)"
		if [[ $addr == *:* ]]; then
			if [[ $op == add ]]; then
				ip -n pl-dorm addr replace "$addr/128" dev br0 nodad
			else
				ip -n pl-dorm addr del "$addr/128" dev br0 2>/dev/null || true
			fi
		else
			if [[ $op == add ]]; then
				ip -n pl-dorm addr replace "$addr/32" dev br0
			else
				ip -n pl-dorm addr del "$addr/32" dev br0 2>/dev/null || true
			fi
		fi
		# The firewalls forget an earlier holder of the address (a DHCP client of an earlier
		# test, gone since), as a real device's gratuitous ARP or unsolicited NA makes them do:
		# a stale entry would send the first packets to a MAC nobody has for seconds.
		for ns in "${NAT_HOSTS[@]}"; do
			ip -n "$ns" neigh flush to "$addr" 2>/dev/null || true
		done
	done
}

cmd_devices() {
	ns_exists pl-dorm || return 0
	ip -n pl-dorm -o addr show dev br0 | awk '$4 ~ /\/(32|128)$/ {sub(/\/[0-9]+$/, "", $4); print $4}'
}

# ----------------------------------------------------------------------------------------- kea
# Each firewall host runs Kea DHCPv4 on its member side. The portal's bundle carries its
# configuration (artefact kea-dhcp4, declared in artefacts.json); until the first push Kea runs
# a configuration without subnets (it answers nobody).
kea_dir() { echo "$LAB_VAR/$1/kea"; }

write_kea_files() {
	local host=$1 dir
	dir=$(kea_dir "$host")
	mkdir -p "$dir"
	chmod 700 "$dir"
	cat >"$LAB_VAR/$host/artefacts.json" <<JSON
{"kea-dhcp4": {"path": "$dir/kea-dhcp4.conf",
               "check": ["kea-dhcp4", "-t", "{file}"],
               "reload": ["$FW_LIB/kea-ctl", "reload", "{file}", "{loaded}"],
               "mode": "0600", "deferred": true},
 "portal-ra": {"path": "$dir/portal-ra.json",
               "check": ["$FW_LIB/portal-ra", "check", "{file}"],
               "reload": ["$FW_LIB/portal-ra", "reload", "{file}"],
               "mode": "0600"},
 "keepalived": {"path": "$(ha_dir "$host")/keepalived.conf",
                "check": ["$HA_NOTIFY", "check-keepalived", "{file}"],
                "reload": ["$HA_NOTIFY", "reload-keepalived", "{file}", "$(ha_dir "$host")"],
                "mode": "0644"},
 "conntrackd": {"path": "$(ha_dir "$host")/conntrackd.conf",
                "check": ["$HA_NOTIFY", "check-conntrackd", "{file}"],
                "reload": ["$HA_NOTIFY", "reload-conntrackd", "{file}", "$(ha_dir "$host")"],
                "mode": "0644"},
 "unbound": {"path": "$(unbound_dir "$host")/unbound.conf",
             "check": ["$FW_LIB/unbound-ctl", "check", "{file}"],
             "reload": ["$FW_LIB/unbound-ctl", "reload", "{file}"],
             "mode": "0644"}}
JSON
	[[ -f $dir/portal-ra.json ]] || cat >"$dir/portal-ra.json" <<JSON
{"interface": "dorm0", "source": "fe80::1", "pid_file": "$dir/portal-ra.pid", "prefixes": {}}
JSON
	chmod 600 "$LAB_VAR/$host/artefacts.json"
	[[ -f $dir/kea-dhcp4.conf ]] && return 0
	cat >"$dir/kea-dhcp4.conf" <<JSON
{"Dhcp4": {"interfaces-config": {"interfaces": ["dorm0"], "dhcp-socket-type": "raw"},
           "control-socket": {"socket-type": "unix", "socket-name": "$dir/kea4.sock"},
           "lease-database": {"type": "memfile", "persist": true, "name": "$dir/leases4.csv"},
           "hooks-libraries": [{"library": "/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so"}],
           "subnet4": []}}
JSON
	chmod 600 "$dir/kea-dhcp4.conf"
}

kea_pid() {
	local pidfile pid
	pidfile="$(kea_dir "$1")/kea.pid"
	[[ -f $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == kea-dhcp4 ]] || return 1
	pid_alive "$pid" || return 1
	echo "$pid"
}

start_kea() {
	local host=$1 dir _
	kea_pid "$host" >/dev/null && return 0
	command -v kea-dhcp4 >/dev/null 2>&1 || die "missing tool: kea-dhcp4 (apt-get install kea-dhcp4-server)"
	dir=$(kea_dir "$host")
	rm -f "$dir/kea4.sock"
	# Kea's own pid and lock files go to the host's directory (two servers share this filesystem).
	ip netns exec "$host" env KEA_PIDFILE_DIR="$dir" KEA_LOCKFILE_DIR="$dir" \
		setsid kea-dhcp4 -c "$dir/kea-dhcp4.conf" >>"$dir/kea.log" 2>&1 </dev/null &
	echo $! >"$dir/kea.pid"
	for _ in $(seq 50); do
		[[ -S $dir/kea4.sock ]] && return 0
		sleep 0.1
	done
	die "Kea of $host did not open its control socket (see $dir/kea.log)"
}

stop_kea() {
	local pid
	pid=$(kea_pid "$1" || true)
	# shellcheck disable=SC2086
	kill_pids $pid
	rm -f "$(kea_dir "$1")/kea.pid"
	pid=$(ra_pid "$1" || true)
	# shellcheck disable=SC2086
	kill_pids $pid
	rm -f "$(kea_dir "$1")/portal-ra.pid"
}

ra_pid() {
	local pid
	pid=$(cat "$(kea_dir "$1")/portal-ra.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" && grep -q portal-ra "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

start_ra() { # router advertisements with each device's room /64 (deploy/firewall/portal-ra)
	local host=$1 dir _
	ra_pid "$host" >/dev/null && return 0
	dir=$(kea_dir "$host")
	ip netns exec "$host" setsid "$PYTHON" "$FW_LIB/portal-ra" run "$dir/portal-ra.json" \
		>>"$dir/portal-ra.log" 2>&1 </dev/null &
	for _ in $(seq 50); do
		ra_pid "$host" >/dev/null && return 0
		sleep 0.1
	done
	die "portal-ra of $host did not start (see $dir/portal-ra.log)"
}

cmd_kea() { # restart|stop HOST
	local op=$1 host
	host=$(host_arg "${2:-}")
	lab_is_up || die "the lab is not up"
	stop_kea "$host"
	if [[ $op == restart ]]; then
		start_kea "$host"
		start_ra "$host" # stop_kea ends portal-ra too
		log "Kea of $host running"
	else
		log "Kea of $host stopped"
	fi
}

# ------------------------------------------------------------------------------------- unbound
# Each firewall host runs Unbound, the members' resolver. The portal's bundle carries its
# configuration (artefact unbound, declared in artefacts.json; reloaded by unbound-ctl); until
# the first push it answers on the host's loopback only.
AUTH_DNS_ADDR=203.0.113.53
unbound_dir() { echo "$LAB_VAR/$1/unbound"; }

write_unbound_files() {
	local host=$1 dir
	dir=$(unbound_dir "$host")
	mkdir -p "$dir"
	chmod 755 "$dir"
	[[ -f $dir/unbound.conf ]] && return 0
	cat >"$dir/unbound.conf" <<CONF
# lab.sh's bootstrap resolver of $host: loopback only, until the portal pushes its own.
server:
    use-syslog: no
    logfile: ""
    chroot: ""
    username: ""
    pidfile: "$dir/unbound.pid"
    interface: 127.0.0.1
    access-control: 127.0.0.0/8 allow
remote-control:
    control-enable: yes
    control-interface: "$dir/unbound.ctl"
    control-use-cert: no
CONF
}

unbound_pid() { # HOST (or "auth": pl-inet's authoritative server)
	local dir pid
	if [[ $1 == auth ]]; then dir="$LAB_VAR/auth-dns"; else dir=$(unbound_dir "$1"); fi
	# Unbound's own pid file: unbound-ctl restarts it on a change of listening addresses.
	pid=$(cat "$dir/unbound.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == unbound ]] && echo "$pid"
}

run_unbound() { # NS DIR: Unbound in the foreground of its own session (its pid file in DIR)
	local ns=$1 dir=$2 _
	command -v unbound >/dev/null 2>&1 || die "missing tool: unbound (apt-get install unbound)"
	rm -f "$dir/unbound.ctl"
	ip netns exec "$ns" setsid unbound -d -c "$dir/unbound.conf" >>"$dir/unbound.log" 2>&1 </dev/null &
	for _ in $(seq 100); do
		[[ -S $dir/unbound.ctl ]] && return 0
		sleep 0.05
	done
	die "Unbound in $ns did not open its control socket (see $dir/unbound.log)"
}

start_unbound() {
	unbound_pid "$1" >/dev/null && return 0
	run_unbound "$1" "$(unbound_dir "$1")"
}

stop_unbound() {
	local pid
	pid=$(unbound_pid "$1" || true)
	# shellcheck disable=SC2086
	kill_pids $pid
}

start_authoritative() { # the test zone example. in pl-inet (Unbound answering from local data)
	local dir="$LAB_VAR/auth-dns"
	unbound_pid auth >/dev/null && return 0
	mkdir -p "$dir"
	ip -n pl-inet addr replace "$AUTH_DNS_ADDR/24" dev br0
	cat >"$dir/unbound.conf" <<CONF
# The lab's Internet: an authoritative server for the test zone example. (nothing leaves the lab)
server:
    use-syslog: no
    logfile: ""
    chroot: ""
    username: ""
    pidfile: "$dir/unbound.pid"
    interface: $AUTH_DNS_ADDR
    access-control: 0.0.0.0/0 allow
    ip-ratelimit: 0
    local-zone: "example." static
    local-data: "example. 3600 IN SOA ns.example. hostmaster.example. 1 3600 600 86400 300"
    local-data: "example. 3600 IN NS ns.example."
    local-data: "ns.example. 3600 IN A $AUTH_DNS_ADDR"
    local-data: "www.example. 300 IN A 203.0.113.10"
    # Every other name: no such domain, from here (no root servers in the lab).
    local-zone: "." static
remote-control:
    control-enable: yes
    control-interface: "$dir/unbound.ctl"
    control-use-cert: no
CONF
	run_unbound pl-inet "$dir"
}

stop_authoritative() { stop_unbound auth; }

cmd_unbound() { # restart|stop HOST
	local op=$1 host
	host=$(host_arg "${2:-}")
	lab_is_up || die "the lab is not up"
	stop_unbound "$host"
	if [[ $op == restart ]]; then
		start_unbound "$host"
		log "Unbound of $host running"
	else
		log "Unbound of $host stopped"
	fi
}

# ------------------------------------------------------------------------------- DHCP clients
# A device: namespace pl-c-<mac hex> with eth0 (that MAC) on the member bridge, and dhclient.
CLIENT_RE='^[0-9a-f]{2}(:[0-9a-f]{2}){5}$'

client_mac() { # normalise and validate
	local mac=${1,,}
	mac=${mac//-/:}
	[[ $mac =~ $CLIENT_RE ]] || die "not a MAC address: '$1' (six hex pairs, e.g. 02:00:00:00:01:05)"
	(((0x${mac:0:2} & 1) == 0)) || die "$mac is a multicast MAC"
	echo "$mac"
}

client_ns() { echo "pl-c-${1//:/}"; }
client_port() { echo "c${1//:/}"; }

client_addr() { # the IPv4 the client holds, if any
	ip -n "$1" -4 -o addr show dev eth0 scope global 2>/dev/null | awk 'NR == 1 {sub(/\/.*/, "", $4); print $4}' # reads all: no SIGPIPE for ip
}

client_dhclient() { # ns mac: one dhclient run; it stays and renews when it got a lease
	local ns=$1 mac=$2 dir
	dir="$LAB_VAR/clients/${2//:/}"
	mkdir -p "$dir"
	# Option 114 (RFC 8910) as a phone asks for it: its URL lands in dhclient.leases.
	printf 'timeout 10;\nretry 1;\noption captive-portal code 114 = text;\nrequest subnet-mask, routers, domain-name-servers, domain-name, captive-portal;\n' >"$dir/dhclient.conf"
	ip netns exec "$ns" dhclient -4 -1 -cf "$dir/dhclient.conf" -pf "$dir/dhclient.pid" \
		-lf "$dir/dhclient.leases" -sf "$SCRIPT_DIR/dhclient-script" eth0 >"$dir/dhclient.log" 2>&1 || true
	client_addr "$ns"
}

client_stop_dhclient() {
	local dir pid
	dir="$LAB_VAR/clients/${1//:/}"
	pid=$(cat "$dir/dhclient.pid" 2>/dev/null || true)
	if [[ $pid =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dhclient ]]; then
		kill_pids "$pid"
	fi
	rm -f "$dir/dhclient.pid"
}

client_answer() { # ns: print the address or "no lease" (exit 1)
	local addr
	addr=$(client_addr "$1")
	if [[ -z $addr ]]; then
		echo "no lease"
		exit 1
	fi
	echo "$addr"
}

cmd_client() {
	local mac ns port
	need_root
	command -v dhclient >/dev/null 2>&1 || die "missing tool: dhclient (apt-get install isc-dhcp-client)"
	mac=$(client_mac "${1:-}")
	lab_is_up || die "the lab is not up"
	ns=$(client_ns "$mac")
	port=$(client_port "$mac")
	if ! ns_exists "$ns"; then
		ip netns add "$ns"
		# SLAAC from the router advertisement with the device's room /64 (EUI-64, as the
		# portal computes the device's IPv6 address).
		ns_sysctl "$ns" net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
			net.ipv6.conf.all.forwarding=0 net.ipv6.conf.default.accept_ra=1 \
			net.ipv6.conf.default.autoconf=1 net.ipv6.conf.default.addr_gen_mode=0
		ip -n "$ns" link set lo up
		ip -n pl-dorm link del "$port" 2>/dev/null || true
		ip -n pl-dorm link add "$port" type veth peer name eth0 netns "$ns"
		ip -n "$ns" link set eth0 address "$mac"
		ip -n pl-dorm link set "$port" master br0 up
		ip -n "$ns" link set eth0 up
	fi
	client_stop_dhclient "$mac"
	client_dhclient "$ns" "$mac" >/dev/null
	client_answer "$ns"
}

cmd_client_renew() { # ask again now (INIT-REBOOT with the address held: a NAK if it changed)
	local mac ns
	mac=$(client_mac "${1:-}")
	ns=$(client_ns "$mac")
	ns_exists "$ns" || die "no client $mac (lab.sh client $mac)"
	client_stop_dhclient "$mac"
	client_dhclient "$ns" "$mac" >/dev/null
	client_answer "$ns"
}

cmd_client_down() {
	local mac ns
	mac=$(client_mac "${1:-}")
	ns=$(client_ns "$mac")
	client_stop_dhclient "$mac"
	if ns_exists "$ns"; then
		# shellcheck disable=SC2046
		kill_pids $(ip netns pids "$ns" 2>/dev/null || true)
		ip netns del "$ns"
	fi
	ip -n pl-dorm link del "$(client_port "$mac")" 2>/dev/null || true
	rm -rf "$LAB_VAR/clients/${mac//:/}" "/etc/netns/$ns"
}

client_namespaces() { ip netns list 2>/dev/null | awk '$1 ~ /^pl-c-[0-9a-f]{12}$/ {print $1}'; }

cmd_clients() { # MAC ADDRESS per line
	local ns mac
	for ns in $(client_namespaces); do
		mac=$(echo "${ns#pl-c-}" | sed 's/../&:/g; s/:$//')
		printf '%s %s\n' "$mac" "$(client_addr "$ns" || true)"
	done
}

# ------------------------------------------------------------------------------- portal proxy
PORTAL_PROXY_ADDR=203.0.113.80

portal_proxy_pid() {
	local pid
	pid=$(cat "$LAB_VAR/portal-proxy.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" && grep -q portal_proxy "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

cmd_portal_proxy() { # PORT: (re)start the proxy in pl-inet towards 127.0.0.1:PORT
	local port=${1:-} _
	[[ $port =~ ^[0-9]{1,5}$ ]] && ((port >= 1 && port <= 65535)) || die "usage: lab.sh portal-proxy PORT"
	lab_is_up || die "the lab is not up"
	# shellcheck disable=SC2046
	kill_pids $(portal_proxy_pid || true)
	ip -n pl-inet addr replace "$PORTAL_PROXY_ADDR/24" dev br0
	setsid "$PYTHON" "$SCRIPT_DIR/portal_proxy.py" --netns pl-inet --listen "$PORTAL_PROXY_ADDR:80" \
		--to "127.0.0.1:$port" >>"$LAB_VAR/portal-proxy.log" 2>&1 </dev/null &
	echo $! >"$LAB_VAR/portal-proxy.pid"
	for _ in $(seq 50); do
		if ip netns exec pl-inet timeout 1 bash -c "exec 3<>/dev/tcp/$PORTAL_PROXY_ADDR/80" 2>/dev/null; then
			log "portal proxy: http://$PORTAL_PROXY_ADDR/ in pl-inet -> 127.0.0.1:$port"
			return 0
		fi
		sleep 0.1
	done
	die "the portal proxy did not start (see $LAB_VAR/portal-proxy.log)"
}

# --------------------------------------------------------------------- off-site status web host
# The status page's second web host, outside the network it describes (issue 27): a namespace of
# its own on the Internet side. The portal publishes into DIR (PORTAL_STATUS_PUBLISH_TARGET, a
# directory: the shared filesystem stands in for the copy to a remote host, which
# tests/deploy/test_status_offsite.py proves over SSH); nginx inside pl-status serves it with the
# shipped site deploy/nginx/status-offsite.conf.
STATUS_NS=pl-status
STATUS_ADDR=203.0.113.30
STATUS_DIR="$LAB_VAR/status-web"

status_web_pid() {
	local pid
	pid=$(cat "$STATUS_DIR/nginx.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == nginx ]] && echo "$pid"
}

cmd_status_web() { # DIR
	local root=${1:-} site temp="" k _
	[[ $root == /* && $root != *..* && -d $root ]] || die "usage: lab.sh status-web DIR (an absolute, existing directory)"
	lab_is_up || die "the lab is not up"
	command -v nginx >/dev/null 2>&1 || die "missing tool: nginx (apt-get install nginx-light)"
	cmd_status_web_down quiet
	make_ns "$STATUS_NS"
	ip -n pl-inet link del status 2>/dev/null || true
	ip -n "$STATUS_NS" link add inet0 type veth peer name status netns pl-inet
	ip -n pl-inet link set status master br0 up
	ip -n "$STATUS_NS" link set inet0 up
	ip -n "$STATUS_NS" addr replace "$STATUS_ADDR/24" dev inet0
	mkdir -p "$STATUS_DIR/temp"
	for k in client_body proxy fastcgi uwsgi scgi; do
		temp+="  ${k}_temp_path $STATUS_DIR/temp/$k;"$'\n'
	done
	# The shipped site with the lab's address and directory (IPv4 only: pl-status has no IPv6).
	site=$(sed -e '/listen \[::\]:80;/d' -e "s|listen 80;|listen $STATUS_ADDR:80;|" \
		-e "s|root /srv/status;|root $root;|" "$REPO_ROOT/deploy/nginx/status-offsite.conf")
	cat >"$STATUS_DIR/nginx.conf" <<CONF
user root;
pid $STATUS_DIR/nginx.pid;
error_log $STATUS_DIR/error.log;
worker_processes 1;
events {}
http {
  include /etc/nginx/mime.types;
$temp  access_log $STATUS_DIR/access.log;
$site
}
CONF
	ip netns exec "$STATUS_NS" nginx -c "$STATUS_DIR/nginx.conf" -p "$STATUS_DIR" >>"$STATUS_DIR/nginx.out" 2>&1 ||
		die "nginx did not start in $STATUS_NS (see $STATUS_DIR/nginx.out, $STATUS_DIR/error.log)"
	for _ in $(seq 50); do
		if ip netns exec pl-inet timeout 1 bash -c "exec 3<>/dev/tcp/$STATUS_ADDR/80" 2>/dev/null; then
			log "off-site status page: http://$STATUS_ADDR/ from pl-inet serves $root"
			return 0
		fi
		sleep 0.1
	done
	die "the status web host does not answer (see $STATUS_DIR/error.log)"
}

cmd_status_web_down() {
	local pids
	# shellcheck disable=SC2046
	kill_pids $(status_web_pid || true)
	if ns_exists "$STATUS_NS"; then
		pids=$(ip netns pids "$STATUS_NS" 2>/dev/null || true)
		# shellcheck disable=SC2086
		kill_pids $pids
		ip netns del "$STATUS_NS"
	fi
	if ns_exists pl-inet; then ip -n pl-inet link del status 2>/dev/null || true; fi
	rm -f "$STATUS_DIR/nginx.pid"
	[[ ${1:-} == quiet ]] || log "status web host down"
}

# ------------------------------------------------------------------------------------- up/down
lab_is_up() {
	local ns host
	for ns in "${NAMESPACES[@]}"; do ns_exists "$ns" || return 1; done
	for host in "${NAT_HOSTS[@]}"; do sshd_pid "$host" >/dev/null || return 1; done
	return 0
}

write_lab_json() {
	cat >"$LAB_VAR/lab.json.tmp" <<EOF
{
  "user": "root",
  "port": 22,
  "client_key": "$LAB_VAR/portal_ed25519",
  "known_hosts": "$LAB_VAR/known_hosts",
  "hosts": [
    {"name": "pl-nat1", "address": "${MGMT_ADDR[pl-nat1]}", "state_dir": "$LAB_VAR/pl-nat1/fw",
     "dhcp": {"control_socket": "$LAB_VAR/pl-nat1/kea/kea4.sock", "lease_file": "$LAB_VAR/pl-nat1/kea/leases4.csv",
              "ra_pid_file": "$LAB_VAR/pl-nat1/kea/portal-ra.pid"},
     "resolver": {"address": "10.100.0.2", "control_socket": "$LAB_VAR/pl-nat1/unbound/unbound.ctl",
                  "pid_file": "$LAB_VAR/pl-nat1/unbound/unbound.pid", "user": ""},
     "ha": {"sync_interface": "pl-sync", "sync_address4": "10.255.254.1", "sync_address6": "fdff:255:254::1",
            "run_dir": "$LAB_VAR/pl-nat1/ha", "notify": "$HA_NOTIFY", "conntrackd_config": "$LAB_VAR/pl-nat1/ha/conntrackd.conf"}},
    {"name": "pl-nat2", "address": "${MGMT_ADDR[pl-nat2]}", "state_dir": "$LAB_VAR/pl-nat2/fw",
     "dhcp": {"control_socket": "$LAB_VAR/pl-nat2/kea/kea4.sock", "lease_file": "$LAB_VAR/pl-nat2/kea/leases4.csv",
              "ra_pid_file": "$LAB_VAR/pl-nat2/kea/portal-ra.pid"},
     "resolver": {"address": "10.100.0.3", "control_socket": "$LAB_VAR/pl-nat2/unbound/unbound.ctl",
                  "pid_file": "$LAB_VAR/pl-nat2/unbound/unbound.pid", "user": ""},
     "ha": {"sync_interface": "pl-sync", "sync_address4": "10.255.254.2", "sync_address6": "fdff:255:254::2",
            "run_dir": "$LAB_VAR/pl-nat2/ha", "notify": "$HA_NOTIFY", "conntrackd_config": "$LAB_VAR/pl-nat2/ha/conntrackd.conf"}}
  ],
  "portal_proxy": "203.0.113.80",
  "dns_upstream": "$AUTH_DNS_ADDR",
  "dns_zone": {"www.example": "203.0.113.10"},
  "probe": {"address": "${MGMT_ADDR[$PROBE]}", "internet_address": "203.0.113.20"},
  "virtual_addresses": ["member 10.100.0.1/16", "uplink 203.0.113.1/24", "member 2001:db8:100::1/48",
                        "member fe80::1/64", "uplink 2001:db8:ffff::1/64"],
  "roles": {"ipv4": "$(read_role ipv4)", "ipv6": "$(read_role ipv6)"},
  "inet_client": {"ipv4": "203.0.113.10", "ipv6": "2001:db8:ffff::10", "netns": "pl-inet"},
  "dorm": {"netns": "pl-dorm", "gateway4": "10.100.0.1", "gateway6": "2001:db8:100::1"},
  "interfaces": {"management": "mgmt0", "member_side": "dorm0", "internet_side": "inet0"}
}
EOF
	mv "$LAB_VAR/lab.json.tmp" "$LAB_VAR/lab.json"
}

on_up_exit() {
	local rc=$?
	[[ $rc -eq 0 ]] || log "up FAILED (exit $rc): lab.sh status shows what exists, lab.sh down removes it"
}

# One lab per machine: the checkout that built it is written here (tmpfs: gone after a reboot).
OWNER_FILE=/run/portal-lab.owner

lab_owner() { cat "$OWNER_FILE" 2>/dev/null || true; }

owner_alive() { # checkout: does its lab sshd still run?
	local pidfile pid
	for pidfile in "$1"/var/lab/pl-nat1/sshd.pid "$1"/var/lab/pl-nat2/sshd.pid; do
		pid=$(cat "$pidfile" 2>/dev/null || true)
		[[ $pid =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == sshd ]] && pid_alive "$pid" && return 0
	done
	return 1
}

any_lab_namespace() {
	local ns
	for ns in "${NAMESPACES[@]}"; do ns_exists "$ns" && return 0; done
	root_link_exists "$MGMT_BRIDGE"
}

claim_lab() { # refuse a lab another checkout runs; rebuild one left behind
	local owner
	owner=$(lab_owner)
	if [[ -n $owner && $owner != "$REPO_ROOT" ]]; then
		if owner_alive "$owner"; then
			die "the lab is up and belongs to the checkout $owner (its sshd runs): stop its make run or run 'bash $owner/deploy/lab/lab.sh down' first"
		fi
		log "the lab was left behind by $owner (its processes are gone): rebuilding it for $REPO_ROOT"
		teardown
	elif any_lab_namespace && ! lab_is_up; then
		log "a partial lab is left behind (a crashed run?): rebuilding it"
		teardown
	fi
	echo "$REPO_ROOT" >"$OWNER_FILE"
}

cmd_up() {
	need_root
	local t0=$SECONDS host
	check_overlap || exit 1
	claim_lab
	trap on_up_exit EXIT
	ensure_keys
	make_topology
	install_host_side
	for host in "${NAT_HOSTS[@]}"; do
		write_sshd_files "$host"
		write_kea_files "$host"
		# An `up` over a running lab keeps what keepalived and conntrackd run (the portal may
		# have pushed its own configs there): rewriting them would move the roles under a test.
		if ! keepalived_pid "$host" >/dev/null; then
			write_ha_files "$host"
			start_ha "$host"
		fi
		start_sshd "$host"
		start_kea "$host"
		start_ra "$host"
		write_unbound_files "$host"
		start_unbound "$host"
	done
	start_authoritative
	write_sshd_files "$PROBE"
	start_sshd "$PROBE"
	start_keepalived "${NAT_HOSTS[@]}"
	for host in "${NAT_HOSTS[@]}" "$PROBE"; do wait_sshd "$host"; done
	wait_roles_stable pl-nat1 pl-nat2 20
	write_lab_json
	log "up in $((SECONDS - t0))s: pl-nat1 ${MGMT_ADDR[pl-nat1]}, pl-nat2 ${MGMT_ADDR[pl-nat2]} (ssh root, key $LAB_VAR/portal_ed25519, known_hosts $LAB_VAR/known_hosts); IPv4 on $(read_role ipv4), IPv6 on $(read_role ipv6)"
}

kill_pids() { # pids...: TERM, wait up to 2 s, then KILL
	[[ $# -gt 0 ]] || return 0
	kill -TERM "$@" 2>/dev/null || true
	local _ pid alive
	for _ in $(seq 20); do
		alive=()
		for pid in "$@"; do pid_alive "$pid" && alive+=("$pid"); done
		[[ ${#alive[@]} -eq 0 ]] && return 0
		sleep 0.1
	done
	kill -KILL "${alive[@]}" 2>/dev/null || true
}

cmd_down() {
	[[ $EUID -eq 0 ]] || die "must run as root"
	local owner
	owner=$(lab_owner)
	if [[ -n $owner && $owner != "$REPO_ROOT" ]] && owner_alive "$owner"; then
		die "the lab belongs to the checkout $owner (its sshd runs); take it down from there"
	fi
	teardown
	rm -f "$OWNER_FILE"
	log "down"
}

teardown() { # everything of the lab, whoever built it
	local ns host pids link
	for ns in $(client_namespaces); do
		cmd_client_down "$(echo "${ns#pl-c-}" | sed 's/../&:/g; s/:$//')" || true
	done
	rm -rf "$LAB_VAR/clients"
	# shellcheck disable=SC2046
	kill_pids $(portal_proxy_pid || true) $(pgrep -f 'deploy/lab/portal_proxy.py --netns pl-inet' || true)
	rm -f "$LAB_VAR/portal-proxy.pid"
	stop_authoritative
	cmd_status_web_down quiet
	for host in "${NAT_HOSTS[@]}"; do
		pids=$(sshd_pid "$host" || true)
		# shellcheck disable=SC2086
		kill_pids $pids
		rm -f "$LAB_VAR/$host/sshd.pid"
		stop_kea "$host"
		stop_unbound "$host"
		# The hosts' rule sets die with the namespaces: so do the helper's state, Kea's and
		# keepalived's and conntrackd's (their processes die with the namespace, below).
		rm -rf "$LAB_VAR/$host/fw" "$(kea_dir "$host")" "$(ha_dir "$host")" "$(unbound_dir "$host")"
	done
	for ns in "${NAMESPACES[@]}"; do
		if ns_exists "$ns"; then
			# Every process still inside (rollback timers, anything a test started there).
			pids=$(ip netns pids "$ns" 2>/dev/null || true)
			# shellcheck disable=SC2086
			kill_pids $pids
			ip netns del "$ns"
		fi
	done
	pids=$(sshd_pid "$PROBE" || true)
	# shellcheck disable=SC2086
	kill_pids $pids
	rm -f "$LAB_VAR/$PROBE/sshd.pid"
	for link in pl-m-nat1 pl-m-nat2 pl-m-probe "$MGMT_BRIDGE"; do
		# A veth whose peer's namespace was just deleted goes away on its own, a moment later
		# (the kernel cleans namespaces up asynchronously): gone by then is as good as deleted.
		if root_link_exists "$link"; then
			ip link del "$link" 2>/dev/null || ! root_link_exists "$link"
		fi
	done
	# Processes a vanished checkout left inside the namespaces die with them (above); its
	# veths and bridge go with them too.
	rm -f "$LAB_VAR/roles" "$LAB_VAR/lab.json"
	rm -rf "$FW_LIB"
	rm -f "$FW_SBIN"/{portal-fw,portal-ha,portal-ra,kea-ctl,unbound-ctl}
}

cmd_status() {
	local ns host pid any=0 all=1 state
	for ns in "${NAMESPACES[@]}"; do
		if ns_exists "$ns"; then
			any=1
			state=present
		else
			all=0
			state=absent
		fi
		printf '%-8s %s\n' "$ns" "$state"
	done
	for host in "${NAT_HOSTS[@]}"; do
		if pid=$(sshd_pid "$host"); then
			printf '%-8s sshd pid %s on %s:22\n' "$host" "$pid" "${MGMT_ADDR[$host]}"
		else
			all=0
			printf '%-8s sshd not running\n' "$host"
		fi
	done
	if root_link_exists "$MGMT_BRIDGE"; then any=1; else all=0; fi
	if [[ $any -eq 1 ]]; then
		printf 'roles    ipv4=%s ipv6=%s\n' "$(read_role ipv4)" "$(read_role ipv6)"
		printf 'devices  %s\n' "$(cmd_devices | tr '\n' ' ')"
	fi
	if [[ $all -eq 1 ]]; then
		echo "lab is up"
		return 0
	elif [[ $any -eq 0 ]]; then
		echo "lab is down"
		return 3
	fi
	echo "lab is partly up (run lab.sh up or lab.sh down)"
	return 1
}

cmd_ssh() { # nat1|nat2 VERB... (stdin passes through)
	local host
	host=$(host_arg "${1:-}")
	shift
	exec timeout 120 ssh -F none -o BatchMode=yes -o StrictHostKeyChecking=yes \
		-o UserKnownHostsFile="$LAB_VAR/known_hosts" -o ConnectTimeout=5 \
		-i "$LAB_VAR/portal_ed25519" "root@${MGMT_ADDR[$host]}" "$@"
}

close_inherited_fds() {
	# `flock /tmp/pl-lab.lock lab.sh up` hands its locked descriptor to lab.sh: the daemons
	# started here (sshd, Kea, keepalived, nginx, ...) would keep it, and with it the lock, for
	# as long as the lab runs. Nothing here needs a descriptor above 2 from its caller.
	local fd
	for fd in /proc/$$/fd/*; do
		fd=${fd##*/}
		[[ $fd =~ ^[0-9]+$ ]] && ((fd > 2 && fd != 255)) && eval "exec $fd>&-" 2>/dev/null || true
	done
}

main() {
	local cmd=${1:-}
	[[ $# -gt 0 ]] && shift
	close_inherited_fds
	case "$cmd" in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	check)
		need_root
		check_overlap && log "no overlap between the lab ranges and the root namespace"
		;;
	device-add) cmd_device add "$@" ;;
	device-del) cmd_device del "$@" ;;
	devices) cmd_devices ;;
	failover) cmd_failover "$@" ;;
	failback) cmd_failback ;;
	host-down) cmd_host_down "$@" ;;
	sync-down) cmd_sync_link down ;;
	sync-up) cmd_sync_link up ;;
	ha-status) cmd_ha_status "$@" ;;
	host-up) cmd_host_up "$@" ;;
	sshd-stop) cmd_sshd stop "$@" ;;
	sshd-start) cmd_sshd start "$@" ;;
	role) cmd_role "$@" ;;
	ssh) cmd_ssh "$@" ;;
	client) cmd_client "$@" ;;
	client-renew) cmd_client_renew "$@" ;;
	client-down) cmd_client_down "$@" ;;
	clients) cmd_clients ;;
	portal-proxy) cmd_portal_proxy "$@" ;;
	kea-restart) cmd_kea restart "$@" ;;
	kea-stop) cmd_kea stop "$@" ;;
	unbound-restart) cmd_unbound restart "$@" ;;
	unbound-stop) cmd_unbound stop "$@" ;;
	status-web) cmd_status_web "$@" ;;
	status-web-down) cmd_status_web_down ;;
	*)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
