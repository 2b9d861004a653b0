"""Kernel-lab benchmark (`make bench`, section "Kernel lab"): inside Debian's kernel in qemu.

One boot runs the whole kernel-lab test suite's cases (their time is the suite's time) and then
the established-flow rows side by side: the same flow through the firewall namespace with no
firewall, with the full rule set (the lab's three members plus 2,000 synthetic ones: loading
20,000 six times takes minutes in emulation, and the per-packet cost does not depend on the
count) and the fast path off, with the same rule set and the fast path on, and two variants of
"on" that tell where its cost lies: without the live-marker guard rules (docs/ruleset.md "Fast
path") and without the tc tree. The flow: UDP, 64-byte payloads, iperf3 at full speed (-b 0)
from member 1's device (unshaped) to the Internet side for a few seconds; every variant once per
round, the order rotating from round to round (each variant runs first, last and in between);
packets per second counted at the receiver, CPU time from the VM's /proc/stat (user + system +
softirq of all its CPUs) per received packet, and the sender's own CPU from iperf3. The sender
and receiver run in the same VM, so CPU per packet includes their cost, the same in every
variant. After the rounds, one more "on" flow shows the flowtable's devices and how many of its
packets took the classic path.

Software emulation (no KVM) runs the VM 10-30x slower than the host, and more when the
machine is busy: only the ratios are reported.

    python -m tests.bench.kernel_lab_bench        # prints the rows
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
from collections.abc import Callable, Iterator

from tests.bench.synthetic import synthetic_member
from tests.e2e.kernel_lab.cases import SETUP, all_cases
from tests.e2e.kernel_lab.vm import ROOT, Case, Run, run_all
from tests.e2e.ruleset.scenario import HOST, POLICY, lab_members
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

MEMBERS = 2_000  # per-packet cost does not grow with members (host bench: 20k / 1 = 1.002)
ROUNDS = 6  # with 6 variants: each takes every place in the order once
SECONDS = 3
# none: no firewall; on / off: the full rule set (nft and the tc tree) with the fast path on /
# off; on_noguard: "on" without the live-marker guard rules of the kept-checks (their cost, told
# from noise in the same boot); on_notc: "on" without the tc tree (HTB on both devices), which
# offloaded packets still pass on egress; on_direct: "on" with the tc tree's unclassified
# traffic in HTB's direct queue (`default 0`) instead of its default class (a way to close the
# gap the tree leaves, measured, not built).
VARIANTS = ("none", "on", "on_noguard", "on_notc", "on_direct", "off")
LABELS = {
    "on": "fast path on",
    "on_noguard": "fast path on, guard rules removed",
    "on_notc": "fast path on, no tc tree (nft only)",
    "on_direct": "fast path on, unshaped traffic in HTB's direct queue",
    "off": "fast path off",
}

# /proc/stat's first line: user nice system idle iowait irq softirq; iperf3's JSON end holds the
# sender's (host_total) and receiver's (remote_total) own CPU use in percent.
FLOW = """
echo "t_{variant}_{round}=$(cut -d' ' -f1 /proc/uptime)"
in_ns $INET iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
sleep 1
set -- $(head -1 /proc/stat)
u0=$2; s0=$4; q0=$8
in_ns $DORM timeout 40 iperf3 -c 203.0.113.10 -p 5201 -B 10.100.0.10 -u -b 0 -l 64 -t {seconds} -J > flow.json
set -- $(head -1 /proc/stat)
echo "cpu_{variant}_{round}=$(($2 - u0 + $4 - s0 + $8 - q0))"
echo "softirq_{variant}_{round}=$(($8 - q0))"
echo "offloaded_{variant}_{round}=$(offloaded 'src=10.100.0.10')"
block flow_{variant}_{round} cat flow.json
sleep 1
"""

# What the fast path sees, read once after the rounds with the "on" rule set loaded and a flow
# running: the flowtable's hook devices, and how many packets took the classic path (the
# accounting set counts only those) against what the receiver got.
PROBE = """
reset_lab >/dev/null 2>&1
in_ns $FW tc -batch on.tc && in_ns $FW nft -f on.nft || exit 3
in_ns $INET iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
sleep 1
in_ns $DORM timeout 40 iperf3 -c 203.0.113.10 -p 5201 -B 10.100.0.10 -u -b 0 -l 64 -t {seconds} -J > probe.json
echo "probe_slow_path=$(element_counter acct4_out 10.100.0.10)"
echo "probe_offered=$(rule_counter fast_path 'fast path: flow offered to the flowtable')"
block probe_flowtable in_ns $FW nft list flowtables
block probe_conntrack in_ns $FW conntrack -L -p udp
block probe_flow cat probe.json
block probe_qdisc in_ns $FW tc -s qdisc show
"""

GUARD = re.compile(
    r"^\s*meta l4proto \w+ ct original ip6? daddr & (0\.0\.0\.0|::) \..*!= @.* return$"
)


def _bench_rules(
    fast_path: bool, guard: bool = True, tc: bool = True, direct: bool = False
) -> dict[str, str]:
    members = lab_members() + tuple(synthetic_member(i) for i in range(10, 10 + MEMBERS))
    # The synthetic members' ranges (10.0.0.0/8 privately, 198.18.0.0/15 public) beside the lab's.
    host = dataclasses.replace(
        HOST,
        fast_path=fast_path,
        private_networks=("10.0.0.0/8",),
        public_networks=("198.51.100.0/24", "198.18.0.0/15"),
    )
    compiled = compile_snapshot(s.Snapshot(policy=POLICY, host=host, members=members))
    nft = compiled.nft
    if not guard:
        lines = nft.splitlines()
        kept = [line for line in lines if not GUARD.match(line)]
        if len(lines) - len(kept) != 4:  # 2 in forward_kept, 2 in opening_kept
            raise RuntimeError(f"expected 4 guard rules, removed {len(lines) - len(kept)}")
        nft = "\n".join(kept) + "\n"
    shaping = compiled.tc if tc else ""
    if direct:
        shaping, n = re.subn(r"htb default \d+", "htb default 0", shaping)
        if n != 2:
            raise RuntimeError(f"expected an HTB root on two devices, found {n}")
    return {"rules.nft": nft, "rules.tc": shaping}


def order(rnd: int) -> tuple[str, ...]:
    """Round `rnd`'s order: the variants rotated, so none runs first, last and between."""
    k = rnd % len(VARIANTS)
    return VARIANTS[k:] + VARIANTS[:k]


def bench_case() -> Case:
    """The established-flow rows: every variant once per round, the order rotating."""
    files = {}
    for variant, kwargs in (
        ("off", {"fast_path": False}),
        ("on", {"fast_path": True}),
        ("on_noguard", {"fast_path": True, "guard": False}),
        ("on_notc", {"fast_path": True, "tc": False}),
        ("on_direct", {"fast_path": True, "direct": True}),
    ):
        for name, text in _bench_rules(**kwargs).items():
            files[f"{variant}.{name.split('.')[1]}"] = text
    # Without a firewall nothing translates addresses: the Internet side routes the member
    # range back through the firewall namespace (unused by the NATed variants).
    script = ["reset_lab", "in_ns $INET ip route add 10.100.0.0/16 via 203.0.113.1"]
    for rnd in range(ROUNDS):
        for variant in order(rnd):
            script.append("reset_lab >/dev/null 2>&1")
            if variant != "none":
                script.append(
                    f"if [ -s {variant}.tc ]; then in_ns $FW tc -batch {variant}.tc || exit 3; fi"
                )
                script.append(f"in_ns $FW nft -f {variant}.nft || exit 3")
            script.append(FLOW.format(variant=variant, round=rnd, seconds=SECONDS))
    script.append(PROBE.format(seconds=SECONDS))
    return Case("bench_established", "\n".join(script), files, timeout=1200)


def _received(flow: dict) -> tuple[int, float]:
    end = flow["end"]["sum_received"]
    return end["packets"] - end["lost_packets"], end["seconds"]


def _rows(run: Run, suite: list[str]) -> Iterator[tuple[str, float | str, str, str]]:
    result = run.results["bench_established"]
    values = result.values()
    pps: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    softirq: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sender: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rnd in range(ROUNDS):
        for variant in VARIANTS:
            flow = json.loads(result.block(f"flow_{variant}_{rnd}"))
            if "error" in flow:
                raise RuntimeError(f"kernel lab bench, {variant} round {rnd}: {flow['error']}")
            received, seconds = _received(flow)
            pps[variant].append(received / seconds)
            cpu[variant].append(int(values[f"cpu_{variant}_{rnd}"]) / max(received, 1))
            softirq[variant].append(int(values[f"softirq_{variant}_{rnd}"]) / max(received, 1))
            sender[variant].append(flow["end"]["cpu_utilization_percent"]["host_total"])
    none_pps = statistics.median(pps["none"])
    none_cpu = statistics.median(cpu["none"])
    for variant in VARIANTS[1:]:
        label = LABELS[variant]
        ratios = sorted(p / n for p, n in zip(pps[variant], pps["none"], strict=True))
        yield (
            f"established packets/s, full rule set ({MEMBERS:,} members), {label} / no firewall"
            f" (median of {ROUNDS} paired rounds, order rotating; per round best"
            f" {ratios[-1]:.3f}, median {statistics.median(ratios):.3f}, worst {ratios[0]:.3f})",
            statistics.median(pps[variant]) / none_pps,
            "ratio",
            ">= 0.9" if variant == "on" else "",
        )
        yield (
            f"CPU per packet, {label} / no firewall (whole VM: sender, firewall, receiver)",
            statistics.median(cpu[variant]) / none_cpu,
            "ratio",
            "",
        )
    # The guard rules' cost, paired in each round (same boot, neighbouring runs).
    guard = sorted(a / b for a, b in zip(pps["on"], pps["on_noguard"], strict=True))
    yield (
        "established packets/s, fast path on / the same without the guard rules"
        f" (median of {ROUNDS} paired rounds; best {guard[-1]:.3f}, worst {guard[0]:.3f})",
        statistics.median(guard),
        "ratio",
        "",
    )
    # The no-firewall runs against each other: what emulation noise alone spreads.
    noise = sorted(pps["none"])
    yield (
        f"noise: no-firewall packets/s, slowest / fastest of its {ROUNDS} rounds",
        noise[0] / noise[-1],
        "ratio",
        "",
    )
    for variant in VARIANTS:
        yield (
            f"sender's own CPU (iperf3, % of one vCPU), {LABELS.get(variant, 'no firewall')}"
            " (median)",
            statistics.median(sender[variant]),
            "%",
            "",
        )
    yield (
        "softirq share of the VM's CPU per packet, fast path on / no firewall",
        statistics.median(softirq["on"]) / max(statistics.median(softirq["none"]), 1e-9),
        "ratio",
        "",
    )
    offloaded = [values.get(f"offloaded_on_{r}", "0") for r in range(ROUNDS)]
    yield (
        "established flow offloaded with the fast path on (rounds)",
        f"{sum(o != '0' for o in offloaded)}/{ROUNDS}",
        "",
        "",
    )
    slow, _ = (int(x) for x in (values.get("probe_slow_path") or "0 0").split())
    probe_received, _ = _received(json.loads(result.block("probe_flow")))
    yield (
        "packets of an offloaded flow that took the classic path (accounting) / received",
        f"{slow} / {probe_received}",
        "",
        "",
    )
    devices = re.search(r"devices = \{([^}]*)\}", result.block("probe_flowtable"))
    yield (
        "flowtable's ingress hook devices (nft list flowtables)",
        devices.group(1).strip() if devices else "?",
        "",
        "",
    )
    yield ("kernel lab: boot to /init's test script", run.boot_seconds, "s", "")
    yield ("kernel lab: topology built once", run.setup_seconds, "s", "")
    suite_s = run.boot_seconds + run.setup_seconds + sum(run.results[n].seconds for n in suite)
    yield (
        f"kernel lab: the test suite's {len(suite)} cases, boot included (same boot)",
        suite_s,
        "s",
        "< 180",
    )


def run_benchmarks(
    progress: Callable[[str], None] = lambda _msg: None,
) -> Iterator[tuple[str, float | str, str, str]]:
    cases = all_cases()
    load_start = os.getloadavg()[0]
    progress(f"booting once for {len(cases)} test cases and the established-flow rows")
    run = run_all([*cases, bench_case()], SETUP, timeout=2000)
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "kernel-lab-bench.txt").write_text(run.output)
    if run.error or "bench_established" not in run.results:
        raise RuntimeError(f"kernel lab: {run.error or run.output[-3000:]}")
    failed = [n for n, r in run.results.items() if r.status != 0]
    if failed:
        raise RuntimeError(f"kernel lab: cases {failed} failed:\n{run.output[-3000:]}")
    yield from _rows(run, [c.name for c in cases])
    yield ("machine: load average (1 min) at start", load_start, "", "")
    yield ("machine: load average (1 min) at end", os.getloadavg()[0], "", "")


def main() -> None:
    for name, value, unit, target in run_benchmarks(print):
        shown = f"{value:.3f}" if isinstance(value, float) else value
        print(f"{name}: {shown} {unit} {target}")  # noqa: T201


if __name__ == "__main__":
    main()
