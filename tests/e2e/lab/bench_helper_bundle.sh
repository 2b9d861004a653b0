#!/bin/sh
# Big-table figures for portal-fw apply-bundle/digest (see deploy/firewall/README.md).
# Run as root from the repository; uses its own namespace pl-h3bench and removes it at the end.
#   N, M: elements of the concat map fwd_tcp and of the map dev4 (default 500000, 300000;
#   N=120000 M=70000 is the ~190k-element table of a 20k-member host).
#   JSON=1 also times the nft -j fallback digest (~40 s, 1.5 GB at the default size).
set -eu
N=${N:-500000} M=${M:-300000} W=$(mktemp -d) NS=pl-h3bench
trap 'ip netns del $NS 2>/dev/null; rm -rf "$W"' EXIT
python3 - "$N" "$M" > "$W/big.nft" <<'PY'
import sys
n1, n2 = int(sys.argv[1]), int(sys.argv[2])
def ip(i, a): return f"{a}.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
print("table inet portal_fw {\n map fwd_tcp { type ipv4_addr . inet_service : ipv4_addr . inet_service; size 1048576; }")
print(" map dev4 { type ipv4_addr : ipv4_addr; size 1048576; }")
print(" chain forward { type filter hook forward priority 0; policy accept; ct state established,related counter accept; }\n}")
for s in range(0, n1, 20000):
    print("add element inet portal_fw fwd_tcp { " + ", ".join(f"{ip(i, '198')} . {1024 + i % 60000} : {ip(i, '10')} . {22 + i % 7}" for i in range(s, min(n1, s + 20000))) + " }")
for s in range(0, n2, 20000):
    print("add element inet portal_fw dev4 { " + ", ".join(f"{ip(i, '10')} : {ip(i, '11')}" for i in range(s, min(n2, s + 20000))) + " }")
PY
ip netns add $NS
H="ip netns exec $NS /usr/bin/python3 -I -S deploy/firewall/portal-fw --state-dir $W/state"
SHOW='import json,sys; d=json.load(sys.stdin); g=d.get("digest") or {}; print({k: d.get(k) for k in ("check_seconds", "rollback_point", "apply_seconds") if k in d}, "digest", {k: g.get(k) for k in ("source", "mode", "via", "read", "seconds")})'
echo "table: fwd_tcp $N + dev4 $M elements"
python3 -c "import json,sys; print(json.dumps({'format': 1, 'version': '1' * 64, 'artefacts': {'nft': {'mode': 'replace', 'text': open(sys.argv[1]).read()}}}))" "$W/big.nft" > "$W/full.json"
/usr/bin/time -f "replace: %e s wall, %M KB max RSS" $H apply-bundle --confirm-within 3600 < "$W/full.json" | python3 -c "$SHOW"
$H confirm >/dev/null
printf '%s' '{"format": 1, "version": "2222222222222222222222222222222222222222222222222222222222222222", "artefacts": {"nft": {"mode": "increment", "text": "delete element inet portal_fw dev4 { 10.0.0.1 }\nadd element inet portal_fw dev4 { 10.0.0.1 : 10.201.0.1 }\n"}}}' > "$W/inc.json"
/usr/bin/time -f "one-element increment (dev4): %e s wall, %M KB max RSS" $H apply-bundle --confirm-within 3600 < "$W/inc.json" | python3 -c "$SHOW"
$H confirm >/dev/null
printf '%s' '{"format": 1, "version": "3333333333333333333333333333333333333333333333333333333333333333", "artefacts": {"nft": {"mode": "increment", "text": "add element inet portal_fw fwd_tcp { 203.0.113.1 . 4000 : 10.0.0.9 . 22 }\n"}}}' > "$W/inc2.json"
/usr/bin/time -f "one-element increment (fwd_tcp): %e s wall, %M KB max RSS" $H apply-bundle --confirm-within 3600 < "$W/inc2.json" | python3 -c "$SHOW"
$H confirm >/dev/null
for i in 1 2 3; do
  /usr/bin/time -f "digest (netlink, full): %e s wall, %M KB max RSS" $H digest | python3 -c "$SHOW"
done
/usr/bin/time -f "health --no-digest: %e s wall" $H health --sample-ms 0 --no-digest >/dev/null
if [ "${JSON:-0}" = 1 ]; then
  /usr/bin/time -f "digest (nft -j fallback): %e s wall, %M KB max RSS" $H --digest-source nft digest | python3 -c "$SHOW"
fi
