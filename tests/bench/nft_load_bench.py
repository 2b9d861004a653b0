"""The full nft load of one site's host at seed_demo scale, side by side (issue 26).

Run by tests/bench/run.py (section "Firewall full load") in a subprocess with DATABASE_URL set to
a seed_demo database; prints one JSON object. Alone:

    DATABASE_URL=postgresql://portal@/portal_bench_100000?host=$PWD/var/run \\
        flock /tmp/pl-lab.lock .venv/bin/python -m tests.bench.nft_load_bench [--rounds 2]

The host is the bench host of "Firewall compile from the database" (mq x8 above 50,000
members). Texts, each loaded by one `nft -f` into a fresh namespace (pl-cbnl, the host's links
as veth pairs), rounds interleaved so that the machine's load hits them alike:

* ``previous``: the layout before this change, rebuilt from the compiled IR (`previous_layout`):
  anti-spoofing looked up its own copies of the outbound accounting sets' keys (`dev4_pub`,
  `src6_net`, `src6`);
* ``current``: what the compiler emits;
* ``no_counters``: the current text with the accounting sets declared without `counter`
  (not a rule set the portal loads: what the per-element counters cost the load).

Per load: wall time, the nft process's user and system CPU and its peak RSS (wait4). Then
`nft -c` of the current text on an empty namespace: what the host agent's check before a full
replacement costs on top of the load (deploy/firewall/portal_fw/nft.py).

``agent``: the replacement of the current layout as the host agent loads it
(deploy/firewall/portal_fw/loader.py: libnftables in a child that answers when the kernel
committed; its wall time is to that answer, ``exit`` to the child's exit).

And the loaded tables of the current layout deleted alone (``delete``): its wall time beyond
the nft process's CPU time is nft waiting, as it closes its netlink socket, for the kernel to
free the deleted tables (``nft_rcv_nl_event`` flushes the deferred destroy of the transaction):
what a replacement waits for after its commit (docs/ruleset.md, "Full load at 100,000 members").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

from tests.bench.ruleset_bench import _host_links, _write, namespaces
from workers.ruleset.ir import Ruleset, SetDef
from workers.ruleset.render import render_nft
from workers.ruleset.spelling import capacity

NS = "pl-cbnl"
LOADER = Path(__file__).resolve().parents[2] / "deploy" / "firewall" / "portal_fw" / "loader.py"
OLD_SPOOF4 = "ip saddr != @dev4_pub ip saddr != @nopub4"
OLD_SPOOF6 = "ip6 saddr & ffff:ffff:ffff:ffff:: != @src6_net ip6 saddr != @src6"
NEW_SPOOF4 = "ip saddr != @acct4_out ip saddr != @nopub4"
NEW_SPOOF6 = "ip6 saddr & ffff:ffff:ffff:ffff:: != @acct6n_out ip6 saddr != @acct6_out"


def previous_layout(ruleset: Ruleset) -> Ruleset:
    """The same rule set in the layout before issue 26's nft-load change: plain sets dev4_pub
    (acct4_out's keys), src6_net and src6 (acct6n_out's and acct6_out's) beside the accounting
    sets, and anti-spoofing looking them up (the other table, ip portal_nat, as it is)."""
    table = next(t for t in ruleset.tables if t.name == "portal_fw")
    sets = {s.name: s for s in table.sets}
    for name, source in (
        ("dev4_pub", "acct4_out"),
        ("src6_net", "acct6n_out"),
        ("src6", "acct6_out"),
    ):
        if name not in sets:
            keys = sets[source].elements
            key_type = sets[source].key_type
            sets[name] = SetDef(name, key_type, None, (), keys, capacity(len(keys)))
    chains = tuple(
        dataclasses.replace(
            c,
            rules=tuple(
                r.replace(NEW_SPOOF4, OLD_SPOOF4).replace(NEW_SPOOF6, OLD_SPOOF6) for r in c.rules
            ),
        )
        for c in table.chains
    )
    table = dataclasses.replace(
        table, sets=tuple(sorted(sets.values(), key=lambda s: s.name)), chains=chains
    )
    tables = tuple(table if t.name == "portal_fw" else t for t in ruleset.tables)
    return dataclasses.replace(ruleset, tables=tables)


def without_counters(ruleset: Ruleset) -> Ruleset:
    """The accounting sets declared without `counter` (for the cost of the counters only)."""
    tables = tuple(
        dataclasses.replace(
            t,
            sets=tuple(
                dataclasses.replace(s, extra=tuple(x for x in s.extra if x != "counter"))
                if s.name.startswith("acct")
                else s
                for s in t.sets
            ),
        )
        for t in ruleset.tables
    )
    return dataclasses.replace(ruleset, tables=tables)


def elements(ruleset: Ruleset) -> int:
    return sum(len(s.elements) for t in ruleset.tables for s in t.sets)


def _nft(argv: list[str]) -> dict[str, float]:
    """One nft process: wall, user and system CPU, peak RSS (wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    error = proc.stderr.read().decode()[-500:]
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{' '.join(argv)}: {error}")
    return {
        "wall": wall,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
    }


def _loader(argv: list[str]) -> dict[str, float]:
    """The host agent's loader (portal_fw/loader.py): wall time to its answer (the kernel
    committed) and to its exit, its CPU and peak RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    answered = time.perf_counter() - start
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    error = proc.stderr.read().decode()[-500:]
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) or json.loads(line or b"{}").get("rc") != 0:
        raise RuntimeError(f"{' '.join(argv)}: {line[-300:]!r} {error}")
    return {
        "wall": answered,
        "exit": wall,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
    }


def nft_once(
    path: str,
    host,
    *,
    check: bool = False,
    replace: str | None = None,
    agent: str | None = None,
    delete: str | None = None,
) -> dict:
    """`nft -f` (or `nft -c -f`) of `path` into a fresh namespace; with `replace`, then that
    transaction (the tables deleted and loaded again, as a full push does) on the loaded one;
    with `agent`, that transaction by the host agent's loader instead; with `delete`, then (2 s
    later: the replaced tables freed) the tables deleted alone."""
    nft = ["ip", "netns", "exec", NS, "nft"]
    with namespaces(NS):
        _host_links(NS, host, queues=host.tx_queues)
        out = {"load": _nft([*nft, *(["-c"] if check else []), "-f", path])}
        if replace:
            out["replace"] = _nft([*nft, "-f", replace])
        if agent:
            out["agent"] = _loader(["ip", "netns", "exec", NS, sys.executable, "-I", "-S",
                                    str(LOADER), agent])  # fmt: skip
        if delete:
            time.sleep(2)
            out["delete"] = _nft([*nft, "-f", delete])
    return out


def scope_seconds(text: str) -> dict[str, float]:
    """The host agent's scope check of the full text (portal_fw.scope.check_scope) against the
    character loop it replaced (the reference kept in tests/unit/hostside/test_scope.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "firewall"))
    from portal_fw.scope import check_scope, statements
    from tests.unit.hostside.test_scope import reference_statements

    start = time.perf_counter()
    check_scope(text, "portal_")
    now = time.perf_counter() - start
    start = time.perf_counter()
    before = reference_statements(text)
    then = time.perf_counter() - start
    if before != statements(text):
        raise RuntimeError("the scope splitter and its reference disagree")
    return {"current": now, "previous": then}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from apps.firewall.models import FirewallHost
    from apps.firewall.snapshot import firewall_snapshot_build, snapshot_data_read
    from apps.members.models import Member
    from workers.ruleset import compile_snapshot

    host = FirewallHost(name="bench", address="127.0.0.1")
    if Member.objects.count() > 50_000:
        host = FirewallHost(name="bench", address="127.0.0.1", shaping_root="mq", tx_queues=8)
    snap = firewall_snapshot_build(host=host, data=snapshot_data_read(cached=False))
    compiled = compile_snapshot(snap)
    layouts = {
        "previous": previous_layout(compiled.ruleset),
        "current": compiled.ruleset,
        "no_counters": without_counters(compiled.ruleset),
    }
    if render_nft(layouts["current"]) != compiled.nft:
        raise RuntimeError("the IR does not render to the compiled text")
    result: dict[str, object] = {
        "members": len(snap.members),
        "load_before": os.getloadavg(),
        "started": time.strftime("%H:%M UTC", time.gmtime()),
    }
    runs: dict[str, list[dict]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory(prefix="pl-cbench-") as tmp:
        paths, replaces = {}, {}
        for name, ruleset in layouts.items():
            text = render_nft(ruleset)
            paths[name] = _write(tmp, f"{name}.nft", text)
            # What the host agent loads for a full push (nft.transaction): delete, then the text.
            deletes = "".join(f"delete table {t.family} {t.name}\n" for t in ruleset.tables)
            replaces[name] = _write(tmp, f"{name}.tx", f'{deletes}include "{paths[name]}"\n')
            deletes_only = _write(tmp, "delete.tx", deletes)  # the same two tables in each
            result[f"{name}_mb"] = len(text) / 1e6
            result[f"{name}_elements"] = elements(ruleset)
        for _ in range(args.rounds):
            for name in ("previous", "current"):
                delete = deletes_only if name == "current" else None
                runs[name].append(
                    nft_once(paths[name], snap.host, replace=replaces[name], delete=delete)
                )
            runs["current"].append(nft_once(paths["current"], snap.host, agent=replaces["current"]))
        runs["no_counters"].append(nft_once(paths["no_counters"], snap.host))
        result["check"] = nft_once(paths["current"], snap.host, check=True)["load"]
    for name, rounds in runs.items():
        for kind in ("load", "replace", "agent", "delete"):
            timed = [r[kind] for r in rounds if kind in r]
            if timed:
                best = min(timed, key=lambda r: r["wall"])
                median = statistics.median(r["wall"] for r in timed)
                result[f"{name}_{kind}"] = {**best, "median": median, "n": len(timed)}
    result["scope"] = scope_seconds(compiled.nft)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
