"""Long-lived flows for the failover tests: echo servers and clients that keep talking.

Standard library only; run inside a lab namespace (``ip netns exec pl-dorm python3 flows.py``).

  flows.py serve tcp ADDR PORT [tcp|udp ADDR PORT ...]
        echo servers; prints "ready" when all listen, runs until killed
  flows.py run SPEC_JSON --interval S --stop FILE --max-seconds S [--pending REPORT]
        SPEC: [{"label", "kind": tcp|udp, "src": ADDR|null, "dst", "port", "count"}, ...]
        opens every flow (prints "established N failed M"), then each flow sends a line and
        waits for its echo, every S seconds, until FILE exists; prints one JSON result line:
        per label: opened, failed, resets (connection reset or closed), silent (no echo during
        the last second), and the longest silence between two echoes (max_gap) per flow.
        When FILE.mark appears, it notes the moment and keeps REPORT (default FILE.pending; each
        client its own: two clients sharing one file raced on its rename, and one client's "0"
        hid the other's silent flows) up to date: how many
        flows have not echoed since (0: every flow is alive after the mark); the result then
        also counts, per label, the flows that never echoed after the mark (not_after_mark).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

FLOW_PORTS = (("tcp", (9001, 8080, 8443)), ("udp", (9002,)))


def forget_flows(hosts: tuple[str, ...] = ("pl-nat1", "pl-nat2")) -> None:
    """The flows' conntrack entries off the pair's hosts (from the test process, as root): each
    host's kernel keeps copies of its peer's connections (committed at a takeover, TCP ones
    "be liberal") that no packet ever ends. A later test's new connection that happens to get
    such an entry's source port is carried by it (one of 50 "lost" connections survived a
    failover with conntrackd down in a CI-like run)."""
    for host in hosts:
        for proto, ports in FLOW_PORTS:
            for port in ports:
                for family in ("ipv4", "ipv6"):
                    subprocess.run(
                        ["ip", "netns", "exec", host, "conntrack", "-D", "-f", family, "-p",
                         proto, "--orig-port-dst", str(port)],
                        capture_output=True, timeout=30, check=False,
                    )  # fmt: skip


# ------------------------------------------------------------------------------------- servers
async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


class _UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport):  # type: ignore[override]
        self.transport = transport

    def datagram_received(self, data, addr):  # type: ignore[override]
        self.transport.sendto(data, addr)


async def serve(specs: list[tuple[str, str, int]]) -> None:
    loop = asyncio.get_running_loop()
    for kind, addr, port in specs:
        if kind == "tcp":
            await asyncio.start_server(_echo, addr, port, backlog=2048, reuse_address=True)
        else:
            await loop.create_datagram_endpoint(_UdpEcho, local_addr=(addr, port))
    print("ready", flush=True)
    await asyncio.Event().wait()


# ------------------------------------------------------------------------------------- clients
SILENCE = 0.3  # seconds without an echo that count as a gap (the interval is 0.1 s)


class Flow:
    __slots__ = ("echoes", "label", "last", "max_gap", "reset", "silences")

    def __init__(self, label: str):
        self.label, self.last, self.max_gap, self.reset, self.echoes = label, 0.0, 0.0, "", 0
        self.silences: list[tuple[float, float]] = []  # (monotonic start, seconds)

    def echoed(self) -> None:
        now = time.monotonic()
        if self.last:
            gap = now - self.last
            self.max_gap = max(self.max_gap, gap)
            if gap > SILENCE:
                self.silences.append((round(self.last, 3), round(gap, 3)))
        self.last, self.echoes = now, self.echoes + 1


async def tcp_open(spec: dict, limit: asyncio.Semaphore):
    family = socket.AF_INET6 if ":" in spec["dst"] else socket.AF_INET
    async with limit:
        return await asyncio.wait_for(
            asyncio.open_connection(
                spec["dst"],
                spec["port"],
                family=family,
                local_addr=(spec["src"], 0) if spec.get("src") else None,
            ),
            10,
        )


async def tcp_talk(flow: Flow, reader, writer, interval: float, stop: asyncio.Event) -> None:
    try:
        while not stop.is_set():
            writer.write(b"ping 0123456789abcdef\n")
            await writer.drain()
            line = await reader.readline()
            if not line:
                flow.reset = "closed"
                return
            flow.echoed()
            await asyncio.sleep(interval)
    except (ConnectionResetError, BrokenPipeError) as exc:
        flow.reset = type(exc).__name__
    except asyncio.CancelledError:
        pass
    except OSError as exc:
        flow.reset = f"OSError {exc.errno}"


class _UdpClient(asyncio.DatagramProtocol):
    def __init__(self):
        self.replies: asyncio.Queue = asyncio.Queue()

    def datagram_received(self, data, addr):  # type: ignore[override]
        self.replies.put_nowait(data)


async def udp_talk(flow: Flow, spec: dict, interval: float, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in spec["dst"] else socket.AF_INET
    transport, proto = await loop.create_datagram_endpoint(
        _UdpClient,
        remote_addr=(spec["dst"], spec["port"]),
        local_addr=(spec["src"], 0) if spec.get("src") else None,
        family=family,
    )
    try:
        while not stop.is_set():
            transport.sendto(b"ping")
            try:
                await asyncio.wait_for(proto.replies.get(), max(interval * 5, 0.3))
                flow.echoed()
                await asyncio.sleep(interval)
            except TimeoutError:
                continue  # UDP: nobody retransmits for us; send again
    except asyncio.CancelledError:
        pass
    finally:
        transport.close()


async def run(
    specs: list[dict], interval: float, stop_file: str, max_seconds: float, report: str
) -> dict:
    limit = asyncio.Semaphore(64)
    stop = asyncio.Event()
    flows: list[Flow] = []
    tasks = []
    failed: dict[str, int] = {}
    opened: dict[str, int] = {}
    for spec in specs:
        label = spec["label"]
        failed.setdefault(label, 0)
        opened.setdefault(label, 0)
        if spec["kind"] == "udp":
            for _ in range(spec["count"]):
                flow = Flow(label)
                flows.append(flow)
                tasks.append(asyncio.create_task(udp_talk(flow, spec, interval, stop)))
                opened[label] += 1
            continue
        results = await asyncio.gather(
            *(tcp_open(spec, limit) for _ in range(spec["count"])), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                failed[label] += 1
                continue
            opened[label] += 1
            flow = Flow(label)
            flows.append(flow)
            tasks.append(asyncio.create_task(tcp_talk(flow, *result, interval, stop)))
    await asyncio.sleep(max(1.0, interval * 5))  # every flow echoed at least once
    print(f"established {sum(opened.values())} failed {sum(failed.values())}", flush=True)
    deadline = time.monotonic() + max_seconds
    mark: float | None = None
    next_report = 0.0
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        if mark is None and os.path.exists(stop_file + ".mark"):
            mark = time.monotonic()
        if mark is not None and time.monotonic() >= next_report:
            pending = sum(1 for f in flows if f.last <= mark)
            tmp = report + ".tmp"
            Path(tmp).write_text(str(pending))
            os.replace(tmp, report)
            next_report = time.monotonic() + 0.2
    end = time.monotonic()
    stop.set()
    await asyncio.sleep(interval * 2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out: dict = {}
    for label in opened:
        mine = [f for f in flows if f.label == label]
        out[label] = {
            "opened": opened[label],
            "failed": failed[label],
            "resets": sum(1 for f in mine if f.reset),
            "reset_kinds": sorted({f.reset for f in mine if f.reset}),
            "silent": sum(1 for f in mine if not f.last or end - f.last > 1.0),
            "max_gap": [round(max(f.max_gap, end - f.last if f.last else 0), 3) for f in mine],
            "echoes": sum(f.echoes for f in mine),
            "silences": sorted(x for f in mine for x in f.silences),
            "not_after_mark": None if mark is None else sum(1 for f in mine if f.last <= mark),
        }
    return out


# ------------------------------------------------------------------ driver (tests, benchmark)
INET4, INET6 = "203.0.113.10", "2001:db8:ffff::10"
FLOWS = str(Path(__file__).resolve())


def netns_python(ns: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, FLOWS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    line = proc.stdout.readline() if proc.stdout else ""
    assert line, f"no output: {proc.stderr.read() if proc.stderr else ''}"
    return line.strip()


class Traffic:
    """Echo servers and 1,000 talking flows across the pair, stopped and reported at the end."""

    def __init__(
        self, public: str, device4: str, device6: str, tmp_path: Path, counts=(600, 200, 150, 50)
    ):
        snat, dnat, v6, udp = counts
        self.stop_file = tmp_path / "stop"
        self.servers = [
            netns_python("pl-inet", "serve", "tcp", INET4, "9001", "udp", INET4, "9002"),
            netns_python("pl-dorm", "serve", "tcp", device4, "8080", "tcp", device6, "8443"),
        ]
        for server in self.servers:
            assert first_line(server) == "ready"
        dorm = [
            {"label": "snat", "kind": "tcp", "src": device4, "dst": INET4, "port": 9001, "count": snat},
            {"label": "udp", "kind": "udp", "src": device4, "dst": INET4, "port": 9002, "count": udp},
        ]  # fmt: skip
        inet = [
            {"label": "dnat", "kind": "tcp", "src": INET4, "dst": public, "port": 8080, "count": dnat},
            {"label": "ipv6", "kind": "tcp", "src": INET6, "dst": device6, "port": 8443, "count": v6},
        ]  # fmt: skip
        common = ("--interval", "0.1", "--stop", str(self.stop_file), "--max-seconds", "120")
        self.pending = [Path(f"{self.stop_file}.pending.{side}") for side in ("dorm", "inet")]
        self.clients = [
            netns_python("pl-dorm", "run", json.dumps(dorm), *common, "--pending", str(self.pending[0])),
            netns_python("pl-inet", "run", json.dumps(inet), *common, "--pending", str(self.pending[1])),
        ]  # fmt: skip
        self.established = [first_line(c) for c in self.clients]
        self.total = sum(counts)

    def all_alive_after_now(self, within: float) -> tuple[bool, float]:
        """Mark this moment and wait (at most WITHIN seconds) until every flow has echoed after
        it: a connection that survived a transition talks again, at the latest after TCP's
        retransmission backoff (0.2, 0.4, 0.8, 1.6, 3.2, 6.4 s); a lost one never does.
        Returns whether all did, and how long that took."""
        started = time.monotonic()
        for report in self.pending:
            report.unlink(missing_ok=True)
        Path(f"{self.stop_file}.mark").write_text("mark")
        while time.monotonic() - started < within:
            if all(r.exists() and r.read_text().strip() == "0" for r in self.pending):
                return True, round(time.monotonic() - started, 2)
            time.sleep(0.1)
        return False, round(time.monotonic() - started, 2)

    def finish(self) -> dict:
        self.stop_file.write_text("stop")
        result: dict = {}
        try:
            for client in self.clients:
                out, err = client.communicate(timeout=60)
                assert client.returncode == 0, err
                result.update(json.loads(out.strip().splitlines()[-1]))
        finally:
            self.close()
        return result

    def close(self) -> None:
        for proc in self.clients + self.servers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def main(argv: list[str]) -> int:
    if argv[0] == "serve":
        rest = argv[1:]
        specs = [(rest[i], rest[i + 1], int(rest[i + 2])) for i in range(0, len(rest), 3)]
        asyncio.run(serve(specs))
        return 0
    specs = json.loads(argv[1])
    opts = dict(zip(argv[2::2], argv[3::2], strict=True))
    stop_file = opts["--stop"]
    report = opts.get("--pending", stop_file + ".pending")
    result = asyncio.run(
        run(specs, float(opts["--interval"]), stop_file, float(opts["--max-seconds"]), report)
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
