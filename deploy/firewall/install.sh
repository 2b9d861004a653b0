#!/usr/bin/env bash
# The firewall host side, installed (or upgraded) on one firewall host: deploy/install.sh firewall.
#
#   the package      $LIB/portal_fw/*.py (root:root 0644) + its bytecode (compileall)
#   entry points     $LIB/{portal-fw,portal-ha,portal-ra,kea-ctl} (0755), linked from $SBIN
#   state            $STATE (0700): the agent's state directory (kept on upgrades)
#
# Options: --lib DIR (/usr/local/lib/portal-fw), --sbin DIR (/usr/local/sbin),
# --state DIR (/var/lib/portal-fw; '' for none), --python PATH (/usr/bin/python3).
# An upgrade from the helper before the agent (portal-fw + portal_fw.py + portal-ha + portal-ra
# + kea-ctl as files in /usr/local/sbin) replaces those files by the links and removes
# portal_fw.py and its bytecode; the forced command line in authorized_keys stays as it is.
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB=/usr/local/lib/portal-fw
SBIN=/usr/local/sbin
STATE=/var/lib/portal-fw
PYTHON=/usr/bin/python3
while [[ $# -gt 0 ]]; do
	case $1 in
	--lib) LIB=$2 ;;
	--sbin) SBIN=$2 ;;
	--state) STATE=$2 ;;
	--python) PYTHON=$2 ;;
	*) echo "usage: $0 [--lib DIR] [--sbin DIR] [--state DIR] [--python PATH]" >&2; exit 2 ;;
	esac
	shift 2
done
ENTRY_POINTS=(portal-fw portal-ha portal-ra kea-ctl)
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
	{ echo "portal-fw needs Python 3.11 or newer ($PYTHON)" >&2; exit 1; }

# On a host the files belong to root; run by another user (a test of this script), they can only
# be that user's own, in directories it owns.
if [[ $EUID -eq 0 ]]; then own=(-o root -g root); else own=(); fi

# A new directory beside the old one, switched by one rename: an agent that starts during the
# upgrade sees either the old package or the new one, never half of each.
new="$LIB.new.$$"
rm -rf "$new"
install -d "${own[@]}" -m 0755 "$new/portal_fw"
install "${own[@]}" -m 0644 "$SRC"/portal_fw/*.py "$new/portal_fw/"
for name in "${ENTRY_POINTS[@]}"; do
	install "${own[@]}" -m 0755 "$SRC/$name" "$new/$name"
done
"$PYTHON" -I -m compileall -q "$new/portal_fw"
install -d "${own[@]}" -m 0755 "$(dirname "$LIB")"
if [[ -d $LIB ]]; then
	mv "$LIB" "$LIB.old.$$"
	mv "$new" "$LIB"
	rm -rf "$LIB.old.$$"
else
	mv "$new" "$LIB"
fi
install -d "${own[@]}" -m 0755 "$SBIN"
for name in "${ENTRY_POINTS[@]}"; do
	ln -sfn "$LIB/$name" "$SBIN/$name.new.$$"
	mv -T "$SBIN/$name.new.$$" "$SBIN/$name"
done
rm -rf "$SBIN/portal_fw.py" "$SBIN/__pycache__/portal_fw".*.pyc # the helper before the agent
[[ -z $STATE ]] || install -d "${own[@]}" -m 0700 "$STATE"
echo "portal-fw: agent $("$PYTHON" -I -S -c "import sys; sys.path.insert(0, '$LIB'); import portal_fw; print(portal_fw.AGENT_PROTOCOL)") installed in $LIB (entry points in $SBIN)"
