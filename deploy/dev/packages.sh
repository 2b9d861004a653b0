#!/usr/bin/env bash
# Ensure the Debian packages the portal needs are installed.
# As root: installs what is missing with apt (services are not started by the packages).
# Otherwise: prints the one apt command to run and exits 1.
set -euo pipefail

PACKAGES=(
  python3 python3-venv
  postgresql redis-server
  nftables iproute2 iputils-ping openssh-server openssh-client socat netcat-openbsd
  chromium fonts-dejavu-core gettext nginx-light openssl systemd dovecot-imapd
  kea-dhcp4-server kea-admin isc-dhcp-client conntrack conntrackd keepalived hping3 prometheus
  prometheus-alertmanager rsync qemu-system-x86 busybox-static iperf3 unbound dnsperf bind9-dnsutils
)
# Tests may add a package name here to exercise the "missing package" path.
if [[ -n "${PORTAL_EXTRA_PACKAGES:-}" ]]; then
  read -r -a extra <<<"$PORTAL_EXTRA_PACKAGES"
  PACKAGES+=("${extra[@]}")
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$pkg")
done
# The kernel lab's kernel: Debian's kernel package, downloaded (never installed) into
# ./var/kernel-lab (deploy/kernel-lab/kernel_lab.py; a few seconds once, nothing when cached).
# Only when none is cached: the lab itself looks for a newer one when it runs (apt-cache is slow).
kernel_lab() {
  [[ $(id -u) -eq 0 ]] || return 0
  compgen -G "${PORTAL_KERNEL_LAB_DIR:-$(dirname "$0")/../../var/kernel-lab}/linux-image-*.deb" >/dev/null && return 0
  python3 "$(dirname "$0")/../kernel-lab/kernel_lab.py" fetch >/dev/null ||
    echo "kernel lab: the kernel package could not be fetched; its tests will be skipped" >&2
}
if [[ ${#missing[@]} -eq 0 ]]; then
  kernel_lab
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "Missing Debian packages: ${missing[*]}" >&2
  echo "Install them once as root, then run make again:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "Installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Keep the packages from starting their system-wide services (PostgreSQL, Redis, nginx, sshd):
# the portal runs its own under ./var and must not change the machine's configuration.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
fi
cleanup() { [[ $own_policy -eq 1 ]] && rm -f "$policy"; return 0; }
trap cleanup EXIT
# Another apt (a fresh machine's unattended upgrades, a second checkout's set-up) may hold the
# package lock: wait for it instead of failing.
apt=(apt-get -o DPkg::Lock::Timeout=600)
# An old package list may lack a package: update once, then install.
if ! "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  "${apt[@]}" update -qq
  "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"
fi
kernel_lab
