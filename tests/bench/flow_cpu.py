"""CPU time per new flow through the firewall namespace, per rule-set variant (issue 26).

    flock /tmp/pl-lab.lock python -m tests.bench.flow_cpu [--members 20000] [--rounds 3]
        [--families IPv4,IPv6] [--variants full,base,...] [--text NAME=PATH ...] [--perf PREFIX]

One raw-socket sender (as in `ruleset_bench.flow_rows`: IPv4 UDP to the last member's forward,
IPv6 TCP SYNs to its opening) sends 110,000 new flows; its own CPU time (getrusage, user +
system) divided by the flows sent is the figure. The kernel forwards each packet in the
sender's context (veth -> softirq at the end of its send; this kernel has no
IRQ_TIME_ACCOUNTING, so that time is charged to the sender), through the firewall and the
server namespace: other sessions on the machine change the flows per second, much less the CPU
time per flow. Variants run interleaved, rounds times; the medians and base / variant are
printed. `base`: conntrack + one DNAT rule and an empty SNAT chain in an ip table (IPv4),
conntrack only (IPv6), the baselines of the issue's target. The `without ...` variants take a
base chain out of the full rule set (what that chain costs; not a working rule set).
`--perf PREFIX` records the sender (perf record -p, cpu-clock) into PREFIX-<family>-<variant>.data.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench import ruleset_bench as rb
from tests.bench.synthetic import synthetic_host, synthetic_member, synthetic_snapshot
from workers.ruleset import compile_snapshot
from workers.ruleset.ir import Chain, Ruleset, Table
from workers.ruleset.render import render_nft
from workers.ruleset.snapshot import Protocol

_LOOP = r"""
import os
import resource
addr = (dst, 0)
sys.stdout.write("ready %d\n" % os.getpid()); sys.stdout.flush()
sys.stdin.readline()
r0 = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter(); deadline = start + seconds; sent = 0
send = s.sendto
for i in range(0, count, 500):
    for p in pkts[i:i + 500]:
        try:
            send(p, addr)
        except OSError:
            pass
    sent = min(count, i + 500)
    if time.perf_counter() > deadline:
        break
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(sent, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
"""
SENDER4 = rb._SENDER.replace(rb._SEND_LOOP, _LOOP)
SENDER6 = rb._SENDER6.replace(rb._SEND_LOOP, _LOOP)
COUNT = 110_000


def _send(cli: str, dst: str, port: int, seconds: float, perf: str | None) -> tuple[int, float]:
    """(flows sent, CPU seconds of the sender) for one sender."""
    script = SENDER6 if ":" in dst else SENDER4
    argv = ["ip", "netns", "exec", cli, "timeout", str(int(seconds) + 30), rb.PYTHON, "-c", script]
    argv += [dst, str(port), "0", str(COUNT), str(seconds), "new"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        ready = proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise RuntimeError("flow sender did not start")
        recorder = None
        if perf:
            recorder = subprocess.Popen(
                ["perf", "record", "-e", "cpu-clock", "-q", "-o", perf, "-p", ready[1]],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        sent, cpu = proc.communicate(timeout=seconds + 30)[0].split()
        if recorder:
            recorder.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return int(sent), float(cpu)


def without(ruleset: Ruleset, names: set[str], empty: bool = False) -> str:
    """The rule set's text without the named chains of portal_fw (or with them emptied)."""
    tables = []
    for t in ruleset.tables:
        chains = []
        for c in t.chains:
            if t.name == "portal_fw" and c.name in names:
                if empty:
                    chains.append(Chain(c.name, (), c.type, c.hook, c.priority, c.policy))
                continue
            chains.append(c)
        tables.append(Table(t.family, t.name, t.sets, tuple(chains), t.flowtables))
    return render_nft(Ruleset(ruleset.host, tuple(tables), ruleset.shapers))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--families", default="IPv4,IPv6")
    parser.add_argument("--variants", default="full,base")
    parser.add_argument("--text", action="append", default=[], help="NAME=PATH of an nft text")
    parser.add_argument("--perf", help="record the sender into PREFIX-<family>-<variant>.data")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    last = synthetic_member(args.members - 1)
    fwd = next(
        f for f in last.forwards if f.protocol is Protocol.UDP and f.public_ports.first == 27015
    )
    device = next(d for d in last.devices if d.id == fwd.device_id)
    opening = last.openings[0]
    device6 = next(d for d in last.devices if d.id == opening.device_id).ipv6[0]
    assert opening.ports is not None
    assert last.public_ipv4 is not None
    full = compile_snapshot(synthetic_snapshot(args.members))
    ct_nat = rb.CT_ONLY + (
        "table ip plc_nat {\n chain pre {\n"
        "  type nat hook prerouting priority dstnat; policy accept;\n"
        f"  ip daddr {last.public_ipv4} udp dport 27015 dnat ip to {device.ipv4}\n }}\n"
        " chain post {\n  type nat hook postrouting priority srcnat; policy accept;\n }\n}\n"
    )
    builtin = {
        "full": lambda: full.nft,
        "base": lambda: None,
        # The base chains of portal_fw a forwarded packet meets: raw `early` and `forward`
        # (no mangle chain since issue 26's one-walk layout).
        "without early": lambda: without(full.ruleset, {"early"}),
        "early empty": lambda: without(full.ruleset, {"early"}, empty=True),
    }
    variants: dict[str, str | None] = {n: builtin[n]() for n in args.variants.split(",")}
    for item in args.text:
        name, path = item.split("=", 1)
        variants[name] = Path(path).read_text()
    fw, cli, srv = f"{rb.PREFIX}fw", f"{rb.PREFIX}cli", f"{rb.PREFIX}srv"
    cpu: dict[tuple[str, str], list[float]] = {}
    families = args.families.split(",")
    with tempfile.TemporaryDirectory(prefix="pl-cbench-") as tmp:
        for _ in range(args.rounds):
            for fam in families:
                if fam == "IPv4":
                    dst, port = str(last.public_ipv4), 27015
                else:
                    dst, port = str(device6), opening.ports.first
                for name, text in variants.items():
                    text = text or (ct_nat if fam == "IPv4" else rb.CT_ONLY)
                    with rb.namespaces(fw, cli, srv):
                        rb._flow_setup(
                            fw, cli, srv, synthetic_host(), str(device.ipv4), str(device6), port
                        )
                        rb._run("nft", "-f", rb._write(tmp, "fw.nft", text), ns=fw)
                        for addr, ns in (
                            (str(device.ipv4), fw),
                            (str(device6), fw),
                            ("198.19.255.1", cli),
                            ("fd00:198:19:ffff::1", cli),
                        ):
                            rb._run("ping", "-c", "1", "-W", "2", addr, ns=ns, check=False)
                        before = rb._received(srv)
                        tag = name.replace(" ", "_")
                        perf = f"{args.perf}-{fam}-{tag}.data" if args.perf else None
                        sent, seconds = _send(cli, dst, port, args.seconds, perf)
                        time.sleep(0.2)
                        got = rb._received(srv) - before
                        per = seconds / sent * 1e6
                        cpu.setdefault((fam, name), []).append(per)
                        sys.stdout.write(f"{fam} {name:24} {got}/{sent} flows {per:.3f} us/flow\n")
                        sys.stdout.flush()
    sys.stdout.write(f"medians of {args.rounds}, load {os.getloadavg()[0]:.2f} at the end\n")
    for fam in families:
        base = statistics.median(cpu[(fam, "base")]) if (fam, "base") in cpu else None
        for (f, name), values in cpu.items():
            if f == fam:
                m = statistics.median(values)
                ratio = f"  base / this {base / m:.3f}" if base else ""
                sys.stdout.write(f"{fam} {name:24} {m:.3f} us per flow{ratio}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
