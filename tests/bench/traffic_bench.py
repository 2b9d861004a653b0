"""Traffic per member: one collection at 20,000 and 100,000 members, on the host and in the
portal, and what the accounting sets cost a full load of the rule set.

Run by tests/bench/run.py in a subprocess (root, for the namespaces) with DATABASE_URL set to a
seed_demo scratch database of the same size; prints one JSON object.

Method. Host: the synthetic snapshot of N members (tests/bench/synthetic.py) compiled twice,
with the accounting sets and chain and without (the IR minus the acct*_in sets, the counters of
the acct*_out sets, which stay as anti-spoofing's sets, and the `account` chains), each loaded with `nft -f` into a fresh namespace (pl-cbt*) with the host's links, best
of 3. Every accounting element is then given a counter value (as if each key had traffic) and
the helper's `traffic` verb runs in the namespace (state dir in a tmp dir): its time (best of
3) and the size of its answer; then a full replacement through the helper's own path that
carries the counters (read while its loader parses, folded after the answer: timed apart),
against the same replacement without them (both by the agent's loader, portal_fw/loader.py,
timed to its answer), and from the agent's log how long its reading took and how long from its
end to the commit (what the kernel counted then is not carried).
Portal: every device of the seed_demo database gets IPv4 in/out rows and every /64 IPv6
in/out rows; the answer's parse (JSON + traffic_reply_parse) is timed, then `traffic_store`
stores the first reading (every key new) and a second one (every
key changed): time, counter rows, bucket rows.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

from tests.bench.ruleset_bench import _host_links, _run, _write, namespaces

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "deploy" / "firewall" / "portal-fw"  # the agent's entry point
LOADER = ROOT / "deploy" / "firewall" / "portal_fw" / "loader.py"


def best(fn, rounds: int = 3):
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def without_accounting(ruleset):
    from workers.ruleset.ir import Table

    # The `out` sets are also the anti-spoofing sets (chains look them up): they stay, as plain
    # sets without counters; the `in` sets and the account chains go.
    tables = tuple(
        dataclasses.replace(
            t,
            sets=tuple(
                dataclasses.replace(s, extra=tuple(x for x in s.extra if x != "counter"))
                if s.name.startswith("acct")
                else s
                for s in t.sets
                if not (s.name.startswith("acct") and s.name.endswith("_in"))
            ),
            chains=tuple(
                dataclasses.replace(
                    c, rules=tuple(r for r in c.rules if not ACCOUNT_JUMP.fullmatch(r.strip()))
                )
                for c in t.chains
                if not c.name.startswith("account")
            ),
        )
        for t in ruleset.tables
        if isinstance(t, Table)
    )
    return dataclasses.replace(ruleset, tables=tables)


ACCOUNT_JUMP = re.compile(r"(?:goto|jump) account_\w+")  # into the chains left out
COUNTED_SET = re.compile(r"(\tset acct\w+ \{\n(?:\t\t[^\n]*\n)*?\t\telements = \{)(.*?)(\})", re.S)


def with_counts(text: str) -> str:
    """Every accounting element with a counter value (elements are one per line)."""

    def elements(m: re.Match) -> str:
        body = re.sub(
            r"([0-9a-f:.]+)(,?)\n",
            lambda e: f"{e.group(1)} counter packets 1000 bytes 1500000{e.group(2)}\n",
            m.group(2),
        )
        return m.group(1) + body + m.group(3)

    return COUNTED_SET.sub(elements, text)


CARRY = f"""
import json, pathlib, sys, time
sys.path.insert(0, {str(ROOT / "deploy" / "firewall")!r})
from portal_fw import nft
from portal_fw.host import Host
host = Host(pathlib.Path(sys.argv[1]), "bench")
tx = pathlib.Path(sys.argv[2]).read_text()
start = time.perf_counter()
rc = nft.nft_file(host, tx, check_only=False).returncode
answered = time.perf_counter() - start
start = time.perf_counter()
host.run_later()  # the fold into the carried totals, after the answer
folded = time.perf_counter() - start
print(json.dumps({{"rc": rc, "answered": answered, "folded": folded}}))
"""


def helper(ns: str, state: str, *args: str) -> str:
    return _run(sys.executable, "-I", "-S", str(HELPER), "--state-dir", state, "--host-name", "bench",
                *args, ns=ns)  # fmt: skip


def host_side(members: int) -> dict:
    from tests.bench.synthetic import synthetic_snapshot
    from workers.ruleset.build import build
    from workers.ruleset.render import render

    snap = synthetic_snapshot(members)
    ruleset = build(snap)
    full = render(ruleset).nft
    plain = render(without_accounting(ruleset)).nft
    counted = with_counts(full)
    keys = sum(len(s.elements) for t in ruleset.tables for s in t.sets if s.name.startswith("acct"))
    out: dict = {"keys": keys}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("plain", plain), ("accounting", full)):
            path = _write(tmp, f"{name}.nft", text)

            def load(path=path) -> None:
                with namespaces("pl-cbt1"):
                    _host_links("pl-cbt1", snap.host)
                    start = time.perf_counter()
                    _run("nft", "-f", path, ns="pl-cbt1")
                    load.seconds = time.perf_counter() - start  # type: ignore[attr-defined]

            times = []
            for _ in range(3):
                load()
                times.append(load.seconds)  # type: ignore[attr-defined]
            out[f"load_{name}"] = min(times)
        counted_path = _write(tmp, "counted.nft", counted)
        replace_path = _write(tmp, "replace.nft", "delete table inet portal_fw\n" + full)
        with namespaces("pl-cbt2"):
            _host_links("pl-cbt2", snap.host)
            _run("nft", "-f", counted_path, ns="pl-cbt2")
            state = str(Path(tmp, "state"))
            seconds, answer = best(lambda: helper("pl-cbt2", state, "traffic"))
            data = json.loads(answer)
            out["verb_seconds"] = seconds
            out["answer_bytes"] = len(answer)
            out["rows"] = sum(len(rows) for rows in data["sets"].values())
            # A full replacement as the helper makes it (the counters read while its loader
            # parses, folded after the answer), and bare (the loader alone). Both to the
            # loader's answer (the kernel committed), not to its exit (the kernel freeing the
            # old table: portal_fw/loader.py).
            start = time.perf_counter()
            loader = subprocess.Popen(
                ["ip", "netns", "exec", "pl-cbt2", sys.executable, "-I", "-S", str(LOADER),
                 replace_path], stdout=subprocess.PIPE,
            )  # fmt: skip
            line = loader.stdout.readline()
            out["replace_bare"] = time.perf_counter() - start
            loader.communicate()
            if loader.returncode or json.loads(line).get("rc") != 0:
                raise RuntimeError(f"the loader failed: {line!r}")
            recount = _write(tmp, "recount.nft", "delete table inet portal_fw\n" + counted)
            _run("nft", "-f", recount, ns="pl-cbt2")
            done = json.loads(
                _run(sys.executable, "-I", "-c", CARRY, state, replace_path, ns="pl-cbt2")
            )
            if done["rc"] != 0:
                raise RuntimeError(f"replacement through the helper failed: {done}")
            out["replace_carrying"] = done["answered"]
            out["carry_fold"] = done["folded"]
            carried = json.loads(Path(state, "acct.json").read_text())["base"]
            out["carried_keys"] = sum(len(v) for v in carried.values())
            # The reading as the agent logged it: how long it took (the loader parsing
            # meanwhile) and how long from its end to the commit (what is not carried).
            log = Path(state, "log.jsonl").read_text().splitlines()
            read = [json.loads(line) for line in log if '"traffic-read"' in line][-1]
            out["carry_read"], out["carry_uncounted"] = read["read_s"], read["uncounted_s"]
    return out


def portal_side() -> dict:
    django.setup()
    from django.db import connection
    from django.utils import timezone

    from apps.firewall.models import FirewallHost, Site
    from apps.network.models import Device
    from apps.traffic.models import TrafficBucket, TrafficCounter
    from apps.traffic.services import Row, traffic_store

    site, _ = Site.objects.get_or_create(name="bench-traffic")
    host, _ = FirewallHost.objects.get_or_create(
        name="bench-traffic", defaults={"address": "127.0.0.1", "site": site}
    )
    TrafficCounter.objects.filter(host=host).delete()
    TrafficBucket.objects.filter(site=site).delete()
    rows: list[Row] = []
    nets: set[str] = set()
    for ipv4, ipv6 in Device.objects.values_list("ipv4", "ipv6"):
        rows.append(Row("acct4_in", str(ipv4), 100, 150_000))
        rows.append(Row("acct4_out", str(ipv4), 50, 20_000))
        if ipv6:
            net = ipaddress.IPv6Network(f"{ipv6}/64", strict=False).network_address
            nets.add(str(net))
    for net in sorted(nets):
        rows.append(Row("acct6n_in", net, 100, 300_000))
        rows.append(Row("acct6n_out", net, 40, 30_000))
    # The portal's part before the store: the helper's answer (JSON) parsed and validated.
    from apps.traffic.services import traffic_reply_parse

    sets: dict[str, list] = {}
    for r in rows:
        sets.setdefault(r.set_name, []).append([r.key, r.packets, r.octets])
    answer = json.dumps({"epoch": "b1", "sets": sets})
    start = time.perf_counter()
    traffic_reply_parse(json.loads(answer))
    parse_s = time.perf_counter() - start
    now = timezone.now()
    start = time.perf_counter()
    first = traffic_store(host=host, epoch="b1", rows=rows, now=now)
    first_s = time.perf_counter() - start
    bigger = [Row(r.set_name, r.key, r.packets * 2, r.octets * 2) for r in rows]
    start = time.perf_counter()
    second = traffic_store(host=host, epoch="b1", rows=bigger, now=now)
    second_s = time.perf_counter() - start
    start = time.perf_counter()
    traffic_store(host=host, epoch="b1", rows=bigger, now=now)
    same_s = time.perf_counter() - start
    buckets = TrafficBucket.objects.filter(site=site).count()
    counters = TrafficCounter.objects.filter(host=host).count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM members_member")
        members = cursor.fetchone()[0]
    TrafficCounter.objects.filter(host=host).delete()
    TrafficBucket.objects.filter(site=site).delete()
    return {
        "members": members,
        "rows": len(rows),
        "parse_seconds": parse_s,
        "first_seconds": first_s,
        "second_seconds": second_s,
        "unchanged_seconds": same_s,
        "buckets": buckets,
        "counters": counters,
        "attributed_share": 1 - (first.unattributed / first.octets if first.octets else 0),
        "changed": second.changed,
    }


def main() -> None:
    members = int(os.environ["BENCH_MEMBERS"])
    result = {"portal": portal_side()}
    if os.geteuid() == 0:
        result["host"] = host_side(members)
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
