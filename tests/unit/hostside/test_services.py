"""portal_fw.traffic, health, kea, ra: the parts that read counters, samples, Kea's socket and
the RA configuration, without root."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from portal_fw import health, kea, ra, traffic
from portal_fw.bundle import load_artefacts
from portal_fw.common import HelperError
from portal_fw.host import Host


def test_counters_of_replaced_tables_are_carried_into_the_totals(tmp_path, monkeypatch):
    host = Host(tmp_path, "t")
    traffic.carry_counters(host, {"acct4_in": {"10.0.0.1": [2, 200], "10.0.0.2": [0, 0]}})
    traffic.carry_counters(host, {"acct4_in": {"10.0.0.1": [1, 100]}})
    monkeypatch.setattr(traffic, "read_acct_kernel", lambda h: {"acct4_in": {"10.0.0.1": [5, 5]}})
    answer = traffic.traffic(host, {})
    assert answer["sets"]["acct4_in"] == [["10.0.0.1", 8, 305]]  # zero keys left out
    epoch = answer["epoch"]
    assert traffic.traffic(host, {})["epoch"] == epoch
    state = host.read_json(host.acct_file)
    state["boot"] = "another boot"  # the kernel's counters restarted: a new epoch
    host.write_json(host.acct_file, state)
    assert traffic.traffic(host, {})["epoch"] != epoch


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
