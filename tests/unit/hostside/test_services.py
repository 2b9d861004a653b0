"""portal_fw.traffic, health, kea, ra: the parts that read counters, samples, Kea's socket and
the RA configuration, without root."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from portal_fw import acctstate, health, kea, ra, traffic
from portal_fw.bundle import load_artefacts
from portal_fw.common import HelperError
from portal_fw.host import Host


def test_counters_of_replaced_tables_are_carried_into_the_totals(tmp_path, monkeypatch):
    host = Host(tmp_path, "t")
    acctstate.carry_counters(host, {"acct4_in": {"10.0.0.1": [2, 200], "10.0.0.2": [0, 0]}})
    acctstate.carry_counters(host, {"acct4_in": {"10.0.0.1": [1, 100]}})
    monkeypatch.setattr(traffic, "read_acct_kernel", lambda h: {"acct4_in": {"10.0.0.1": [5, 5]}})
    monkeypatch.setattr(acctstate, "table_handle", lambda h: 7)
    answer = traffic.traffic(host, {})
    assert answer["sets"]["acct4_in"] == [["10.0.0.1", 8, 305]]  # zero keys left out
    epoch = answer["epoch"]
    assert traffic.traffic(host, {})["epoch"] == epoch
    state = host.read_json(host.acct_file)
    state["boot"] = "another boot"  # the kernel's counters restarted: a new epoch
    host.write_json(host.acct_file, state)
    assert traffic.traffic(host, {})["epoch"] != epoch


def test_counters_read_before_a_replacement_are_carried_once_whatever_dies_when(tmp_path):
    """acct.pending.json (what a full replacement read before its commit) against the table
    that runs: folded once when its table is gone, dropped when it still runs (the load was
    refused or never committed), and not folded again after a death between the fold and the
    removal of the pending file."""
    host = Host(tmp_path, "t")
    acctstate.carry_counters(host, {"acct4_in": {"10.0.0.1": [1, 100]}})
    base = lambda: host.read_json(host.acct_file)["base"]["acct4_in"]  # noqa: E731
    pending = acctstate.pending_file(host)

    acctstate.write_pending(host, 5, {"acct4_in": {"10.0.0.1": [2, 200]}})
    acctstate.settle(host, 5)  # table 5 still runs: the kernel still counts them
    assert not pending.exists()
    assert base() == {"10.0.0.1": [1, 100]}

    acctstate.write_pending(host, 5, {"acct4_in": {"10.0.0.1": [2, 200], "10.0.0.2": [1, 1]}})
    kept = pending.read_text()
    acctstate.settle(host, 6)  # replaced by table 6: carried
    assert base() == {"10.0.0.1": [3, 300], "10.0.0.2": [1, 1]}
    pending.write_text(kept)  # died after writing the base, before removing the pending file
    acctstate.settle(host, 6)
    acctstate.settle(host, None)
    assert base() == {"10.0.0.1": [3, 300], "10.0.0.2": [1, 1]}
    assert not pending.exists()

    acctstate.write_pending(host, 6, {"acct4_in": {"10.0.0.1": [1, 1]}})
    state = json.loads(pending.read_text())
    pending.write_text(json.dumps({**state, "boot": "another boot"}))  # the host rebooted
    acctstate.settle(host, 7)
    assert base() == {"10.0.0.1": [3, 300], "10.0.0.2": [1, 1]}


def test_a_health_sample_without_a_pause(tmp_path):
    host = Host(tmp_path, "t")
    host.write_json(host.state_file, {"version": "v", "confirmed": True})
    host.write_json(host.pending_file, {"deadline": 9e9, "armed_at": "x", "version": "w"})
    sample = health.collect(host, 0)
    assert sample["softirq"] == {"sample_ms": 0, "per_cpu": [], "max_share": 0.0}
    assert (sample["version"], sample["confirmed"]) == ("v", True)
    assert sample["pending_confirm"]["version"] == "w"
    assert "lo" in sample["interfaces"]
    assert "ha" not in sample  # not a host of a pair


def kea_server(path, answers):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve():
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(json.dumps(answer).encode())
        server.close()

    threading.Thread(target=serve, daemon=True).start()


def test_dhcp_leases_asks_kea_in_process(tmp_path):
    sock = tmp_path / "kea4.sock"
    conf = tmp_path / "kea-dhcp4.conf"
    conf.write_text(json.dumps({"Dhcp4": {"control-socket": {"socket-name": str(sock)}}}))
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {"path": str(conf), "check": ["true", "{file}"]}}))
    host = Host(tmp_path, "t")
    with pytest.raises(HelperError, match="declares no kea-dhcp4"):
        kea.dhcp_leases(host, {})
    host.artefacts = load_artefacts(declared)
    with pytest.raises(HelperError, match="did not list its leases"):
        kea.dhcp_leases(host, {})  # nobody listens
    lease = {"ip-address": "10.100.0.5", "hw-address": "02:00:00:00:00:05", "cltt": 1,
             "valid-lft": 3600, "hostname": "pc", "state": 0}  # fmt: skip
    kea_server(sock, [[{"result": 0, "arguments": {"leases": [lease]}}]])
    answer = kea.dhcp_leases(host, {})
    assert answer["leases"] == [["10.100.0.5", "02:00:00:00:00:05", 1, 3600, "pc", 0]]


def test_the_ra_configuration_is_validated_and_frames_carry_a_good_checksum(tmp_path):
    path = tmp_path / "ra.json"
    path.write_text(
        json.dumps(
            {"interface": "dorm0", "prefixes": {"02:00:00:00:01:05": "2001:db8:100:101::/64"}}
        )
    )
    cfg = ra.load(str(path))
    mac = bytes.fromhex("020000000105")
    frame = ra.ra_frame(cfg, b"\x02" * 6, mac, cfg["prefixes"][mac])
    assert frame[:6] == mac
    ip6, icmp = frame[14:54], frame[54:]
    pseudo = ip6[8:40] + struct.pack("!I3xB", len(icmp), 58)
    assert ra.checksum(pseudo + icmp) == 0  # a valid checksum sums to zero
    path.write_text(
        json.dumps({"interface": "dorm0", "prefixes": {"02:00:00:00:01:05": "2001:db8::/48"}})
    )
    with pytest.raises(ra.ConfigError, match="not a /64"):
        ra.load(str(path))
    path.write_text(json.dumps({"interface": "eth0; reboot"}))
    with pytest.raises(ra.ConfigError, match="interface name"):
        ra.load(str(path))


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("2001:db8:100:101::/64", None),
        ("2001:DB8:100:101:0:0:0:0/64", None),  # any spelling of the same /64
        ("2001:db8:100:101::1/64", "host bits set"),
        ("2001:db8:100:1011::/64x", "prefix of"),
        ("2001:db8::zz/64", "prefix of"),
        ("10.0.0.0/64", "prefix of"),
        (64, "prefix of"),
    ],
)
def test_a_device_prefix_is_a_64_exactly_as_ipaddress_reads_it(tmp_path, prefix, error):
    path = tmp_path / "ra.json"
    macs = ("02:00:00:00:01:05", "02:00:00:00:01:06")  # two devices of one room
    path.write_text(json.dumps({"interface": "dorm0", "prefixes": dict.fromkeys(macs, prefix)}))
    if error:
        with pytest.raises(ra.ConfigError, match=error):
            ra.load(str(path))
        return
    nets = set(ra.load(str(path))["prefixes"].values())
    assert nets == {ipaddress.IPv6Network(prefix)}


@pytest.mark.skipif(
    not shutil.which("kea-dhcp4"), reason="kea-dhcp4-server is installed by make test"
)
def test_the_health_sample_says_whether_a_real_kea_answers(tmp_path):
    """A real kea-dhcp4 (no interfaces: it opens no DHCP socket) answers status-get and its
    statistics; stopped, the sample says it does not answer, and why."""
    sock, conf = tmp_path / "kea4.sock", tmp_path / "kea-dhcp4.conf"
    conf.write_text(json.dumps({"Dhcp4": {
        "interfaces-config": {"interfaces": []},
        "control-socket": {"socket-type": "unix", "socket-name": str(sock)},
        "lease-database": {"type": "memfile", "persist": False}, "subnet4": [],
    }}))  # fmt: skip
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {"path": str(conf), "check": ["true", "{file}"]}}))
    host = Host(tmp_path, "t")
    host.artefacts = load_artefacts(declared)
    env = {**os.environ, "KEA_PIDFILE_DIR": str(tmp_path), "KEA_LOCKFILE_DIR": str(tmp_path)}
    server = subprocess.Popen(
        ["kea-dhcp4", "-c", str(conf)], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        dhcp = health.collect(host, 0)["dhcp"]
        assert dhcp["answering"] is True
        assert (dhcp["sockets"], dhcp["requests"], dhcp["answers"]) == ("ready", 0, 0)
    finally:
        server.terminate()
        server.wait(timeout=10)
    dhcp = health.collect(host, 0)["dhcp"]
    assert dhcp["answering"] is False
    assert "Kea is not answering" in dhcp["error"]
    assert "dhcp" not in health.collect(Host(tmp_path, "plain"), 0)  # no Kea declared


def test_ra_reload_signals_the_daemon_without_loading_every_prefix_again(tmp_path):
    """The agent checked the file before writing it and the daemon validates it at SIGHUP
    (keeping its configuration when refused): `portal-ra reload` only reads the pid file."""
    flag = tmp_path / "hup"
    code = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGHUP, lambda *a: (pathlib.Path({str(flag)!r}).write_text('x'),"
        " sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(20)\n"
    )
    daemon = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout.readline().strip() == "ready"
        (tmp_path / "ra.pid").write_text(f"{daemon.pid}\n")
        path = tmp_path / "ra.json"
        path.write_text(json.dumps({"interface": "dorm0", "pid_file": str(tmp_path / "ra.pid"),
                                    "prefixes": {"02:00:00:00:01:05": "not checked here"}}))  # fmt: skip
        assert ra.main(["reload", str(path)]) == 0
        daemon.wait(timeout=10)
        assert flag.read_text() == "x"
        path.write_text(json.dumps({"pid_file": "relative.pid"}))
        assert ra.main(["reload", str(path)]) == 1
    finally:
        daemon.kill()


HEADER = b"address,hwaddr,client_id,valid_lifetime,expire,subnet_id,fqdn_fwd,fqdn_rev,hostname,state,user_context\n"


def test_a_lease_round_reads_only_whole_lines_appended_since_the_cursor(tmp_path):
    """What Kea appended after the cursor, to the last whole line (Kea may be writing the next
    one); the last line of an address wins, a deletion (valid_lifetime 0) is `gone`; a file
    that is shorter or another file (LFC) is read in full from Kea."""
    sock, leases = tmp_path / "kea4.sock", tmp_path / "leases4.csv"
    every = {"ip-address": "10.9.0.1", "hw-address": "02:00:00:00:00:01", "cltt": 100,
             "valid-lft": 3600, "hostname": "", "state": 0}  # fmt: skip
    kea_server(sock, [{"result": 0, "arguments": {"leases": [every]}}] * 3)
    leases.write_bytes(HEADER + b"10.9.0.1,02:00:00:00:00:01,,3600,3700,1,0,0,,0,\n")
    first = kea.leases_since(str(sock), leases, None)
    assert first["full"] is True
    assert first["leases"] == [["10.9.0.1", "02:00:00:00:00:01", 100, 3600, "", 0]]
    cursor = tuple(first["cursor"])
    with leases.open("ab") as f:
        f.write(b"10.9.0.2,02:00:00:00:00:02,,120,1120,1,0,0,a&#x2cb,0,\n")
        f.write(b"10.9.0.1,02:00:00:00:00:01,,0,100,1,0,0,,0,\n")  # deleted
        f.write(b"10.9.0.3,02:00:00:00:00:03,,3600,")  # Kea still writing it
    step = kea.leases_since(str(sock), leases, cursor)
    assert step["full"] is False
    assert step["leases"] == [["10.9.0.2", "02:00:00:00:00:02", 1000, 120, "a,b", 0]]
    assert step["gone"] == ["10.9.0.1"]
    with leases.open("ab") as f:
        f.write(b"5000,1,0,0,,0,\n")
    rest = kea.leases_since(str(sock), leases, tuple(step["cursor"]))
    assert rest["leases"] == [["10.9.0.3", "02:00:00:00:00:03", 1400, 3600, "", 0]]
    assert kea.leases_since(str(sock), leases, tuple(rest["cursor"]))["leases"] == []
    leases.write_bytes(HEADER)  # shorter than the cursor: full
    assert kea.leases_since(str(sock), leases, tuple(rest["cursor"]))["full"] is True
    renamed = tmp_path / "leases4.csv.2"  # LFC: the file renamed, a new one begun
    leases.rename(renamed)
    leases.write_bytes(renamed.read_bytes())
    assert kea.leases_since(str(sock), leases, tuple(first["cursor"]))["full"] is True


def test_the_paths_of_keas_configuration_are_parsed_once_per_file(tmp_path):
    """A round from the cursor does not parse Kea's whole configuration (every reservation)
    again: the socket and lease file are remembered for the file as it is; a new file (the
    Kea path writes by rename) is parsed again."""
    conf = tmp_path / "kea-dhcp4.conf"

    def write(sock: str, leases: str) -> None:
        new = tmp_path / "new.conf"
        new.write_text(json.dumps({"Dhcp4": {"control-socket": {"socket-name": sock},
                                             "lease-database": {"type": "memfile",
                                                                "name": leases}}}))  # fmt: skip
        new.replace(conf)

    host = Host(tmp_path, "t")
    write("/run/kea/a.sock", "/var/lib/kea/a.csv")
    assert kea.kea_paths(host, conf) == ("/run/kea/a.sock", Path("/var/lib/kea/a.csv"))
    st = conf.stat()
    conf.write_text("x" * st.st_size)  # not parsed again while inode, size and mtime match
    os.utime(conf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert kea.kea_paths(host, conf) == ("/run/kea/a.sock", Path("/var/lib/kea/a.csv"))
    write("/run/kea/b.sock", "/var/lib/kea/b.csv")
    assert kea.kea_paths(host, conf) == ("/run/kea/b.sock", Path("/var/lib/kea/b.csv"))
