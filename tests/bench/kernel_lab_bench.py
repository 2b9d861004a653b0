"""Kernel-lab benchmark (`make bench`, section "Kernel lab"): inside Debian's kernel in qemu.

One boot runs the whole kernel-lab test suite's cases (their time is the suite's time) and then
the established-flow rows side by side: the same flow through the firewall namespace with no
firewall, with the full rule set (the lab's three members plus 2,000 synthetic ones: loading
20,000 six times takes minutes in emulation, and the per-packet cost does not depend on the
count) and the fast path off, and with the same rule set and the fast path on. The flow: UDP, 64-byte
payloads, iperf3 at full speed (-b 0) from member 1's device (unshaped) to the Internet side for
a few seconds, three rounds in the order none/off/on; packets per second counted at the
receiver, CPU time from the VM's /proc/stat (user + system + softirq of all its CPUs) per
received packet. The sender and receiver run in the same VM, so CPU per packet includes their
cost, the same in every variant.

Software emulation (no KVM) runs the VM 10-30x slower than the host, and more when the
machine is busy: only the ratios are reported.

    python -m tests.bench.kernel_lab_bench        # prints the rows
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Callable, Iterator

from tests.bench.synthetic import synthetic_member
from tests.e2e.kernel_lab.cases import SETUP, all_cases
from tests.e2e.kernel_lab.vm import ROOT, Case, Run, run_all
from tests.e2e.ruleset.scenario import HOST, POLICY, lab_members
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

MEMBERS = 2_000  # per-packet cost does not grow with members (host bench: 20k / 1 = 1.002)
ROUNDS = 5
SECONDS = 4
VARIANTS = ("none", "off", "on")

FLOW = """
echo "t_{variant}_{round}=$(cut -d' ' -f1 /proc/uptime)"
in_ns $INET iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
sleep 1
set -- $(head -1 /proc/stat)
before=$(($2 + $4 + $8))
in_ns $DORM timeout 40 iperf3 -c 203.0.113.10 -p 5201 -B 10.100.0.10 -u -b 0 -l 64 -t {seconds} -J > flow.json
set -- $(head -1 /proc/stat)
after=$(($2 + $4 + $8))
echo "cpu_{variant}_{round}=$((after - before))"
echo "offloaded_{variant}_{round}=$(offloaded 'src=10.100.0.10')"
block flow_{variant}_{round} cat flow.json
sleep 1
"""


def _bench_rules(fast_path: bool) -> dict[str, str]:
    members = lab_members() + tuple(synthetic_member(i) for i in range(10, 10 + MEMBERS))
    # The synthetic members' ranges (10.0.0.0/8 privately, 198.18.0.0/15 public) beside the lab's.
    host = dataclasses.replace(
        HOST,
        fast_path=fast_path,
        private_networks=("10.0.0.0/8",),
        public_networks=("198.51.100.0/24", "198.18.0.0/15"),
    )
    compiled = compile_snapshot(s.Snapshot(policy=POLICY, host=host, members=members))
    return {"rules.nft": compiled.nft, "rules.tc": compiled.tc}


def bench_case() -> Case:
    """The established-flow rows: rule sets loaded once per variant, rounds interleaved."""
    files = {}
    for variant, fast in (("off", False), ("on", True)):
        for name, text in _bench_rules(fast).items():
            files[f"{variant}.{name.split('.')[1]}"] = text
    # Without a firewall nothing translates addresses: the Internet side routes the member
    # range back through the firewall namespace (unused by the NATed variants).
    script = ["reset_lab", "in_ns $INET ip route add 10.100.0.0/16 via 203.0.113.1"]
    for rnd in range(ROUNDS):
        for variant in VARIANTS:
            script.append("reset_lab >/dev/null 2>&1")
            if variant != "none":
                script.append(
                    f"in_ns $FW tc -batch {variant}.tc && in_ns $FW nft -f {variant}.nft || exit 3"
                )
            script.append(FLOW.format(variant=variant, round=rnd, seconds=SECONDS))
    return Case("bench_established", "\n".join(script), files, timeout=900)


def _rows(run: Run, suite: list[str]) -> Iterator[tuple[str, float | str, str, str]]:
    result = run.results["bench_established"]
    values = result.values()
    pps: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rnd in range(ROUNDS):
        for variant in VARIANTS:
            flow = json.loads(result.block(f"flow_{variant}_{rnd}"))
            if "error" in flow:
                raise RuntimeError(f"kernel lab bench, {variant} round {rnd}: {flow['error']}")
            end = flow["end"]["sum_received"]
            received = end["packets"] - end["lost_packets"]
            pps[variant].append(received / end["seconds"])
            cpu[variant].append(int(values[f"cpu_{variant}_{rnd}"]) / max(received, 1))
    none_pps = statistics.median(pps["none"])
    none_cpu = statistics.median(cpu["none"])
    for variant, label in (("on", "fast path on"), ("off", "fast path off")):
        ratios = sorted(p / n for p, n in zip(pps[variant], pps["none"], strict=True))
        target = ">= 0.9" if variant == "on" else ""
        yield (
            f"established packets/s, full rule set ({MEMBERS:,} members), {label} / no firewall"
            f" (median of {ROUNDS} paired rounds; best {ratios[-1]:.3f}, worst {ratios[0]:.3f})",
            statistics.median(pps[variant]) / none_pps,
            "ratio",
            target,
        )
        yield (
            f"CPU per packet, {label} / no firewall (whole VM: sender, firewall, receiver)",
            statistics.median(cpu[variant]) / none_cpu,
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
    run = run_all([*cases, bench_case()], SETUP, timeout=1500)
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
