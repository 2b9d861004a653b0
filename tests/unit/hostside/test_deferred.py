"""The Kea path (portal_fw/deferred.py) against a real kea-dhcp4: the apply writes the file and
answers without waiting for Kea; the detached path reloads, carries requests made meanwhile,
puts back a file Kea refuses, tries again when Kea did not answer, and the next change after
Kea's recovery reaches it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from portal_fw import apply, deferred, health
from portal_fw.bundle import load_artefacts
from portal_fw.common import HelperError
from portal_fw.host import Host

pytestmark = pytest.mark.skipif(
    not shutil.which("kea-dhcp4"), reason="kea-dhcp4-server is installed by make test"
)

KEA_CTL = str(Path(__file__).resolve().parents[3] / "deploy" / "firewall" / "kea-ctl")
SLOW = 2.5  # seconds this host's Kea part takes on top of the reload (a wrapper of the reload)


def config(sock: Path, *reserved: tuple[str, str]) -> str:
    return json.dumps({"Dhcp4": {
        "interfaces-config": {"interfaces": []},
        "control-socket": {"socket-type": "unix", "socket-name": str(sock)},
        "lease-database": {"type": "memfile", "persist": False},
        "subnet4": [{"id": 1, "subnet": "10.9.0.0/16", "reservations": [
            {"hw-address": mac, "ip-address": ip} for mac, ip in reserved]}],
    }})  # fmt: skip


def ask(sock: Path, command: str) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(json.dumps({"command": command}).encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    return json.loads(data)


def reserved_in_kea(sock: Path) -> list[str]:
    subnet = ask(sock, "config-get")["arguments"]["Dhcp4"]["subnet4"][0]
    return sorted(r["hw-address"] for r in subnet["reservations"])


def wait_for(predicate, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    return predicate()


class Kea:
    def __init__(self, tmp_path: Path) -> None:
        self.sock, self.conf = tmp_path / "kea4.sock", tmp_path / "kea-dhcp4.conf"
        self.env = {**os.environ, "KEA_PIDFILE_DIR": str(tmp_path),
                    "KEA_LOCKFILE_DIR": str(tmp_path)}  # fmt: skip
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.sock.unlink(missing_ok=True)
        self.proc = subprocess.Popen(["kea-dhcp4", "-c", str(self.conf)], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        assert wait_for(self.sock.exists, 10), "Kea did not open its control socket"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def kea(tmp_path):
    server = Kea(tmp_path)
    server.conf.write_text(config(server.sock))
    server.start()
    yield server
    server.stop()


def host_with(tmp_path: Path, kea: Kea) -> Host:
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {
        "path": str(kea.conf), "check": ["kea-dhcp4", "-t", "{file}"], "mode": "0600",
        "reload": ["/bin/sh", "-c", f'sleep {SLOW}; exec "$0" "$@"', KEA_CTL, "reload", "{file}"],
        "deferred": True,
    }}))  # fmt: skip
    host = Host(tmp_path / "state", "t", artefacts_file=declared)
    host.state_dir.mkdir()
    host.artefacts = load_artefacts(declared)
    return host


def push(host: Host, text: str) -> float:
    """What apply-bundle does with the file (check, write) and after its answer (run_later);
    returns the seconds until the answer could go out."""
    started = time.monotonic()
    apply.check_file(host, "kea-dhcp4", text)
    apply.apply_artefacts(host, {"kea-dhcp4": {"mode": "replace", "text": text}})
    answered = time.monotonic() - started
    host.run_later()
    return answered


def status(host: Host) -> dict:
    return deferred.status(host, "kea-dhcp4")


def served(host: Host) -> dict | None:
    now = status(host)
    return now if not now["pending"] and now.get("state") != "loading" else None


A, B, C, D, E = (f"02:00:00:00:00:0{i}" for i in range(1, 6))


def test_the_apply_answers_before_kea_reloads_and_the_reservation_still_reaches_kea(tmp_path, kea):
    host = host_with(tmp_path, kea)
    answered = push(host, config(kea.sock, (A, "10.9.0.1")))
    assert answered < SLOW  # the reload (SLOW + Kea's own) runs after the answer
    assert wait_for(lambda: status(host).get("state") == "loading", 5)
    # A health sample (what a push's answer carries) does not wait for Kea's socket meanwhile.
    started = time.monotonic()
    dhcp = health.collect(host, 0)["dhcp"]
    assert time.monotonic() - started < 1
    assert dhcp["reloading"] is True
    assert dhcp["config"]["state"] == "loading"
    done = wait_for(lambda: served(host))
    assert done["state"] == "loaded", done
    assert reserved_in_kea(kea.sock) == [A]
    assert health.collect(host, 0)["dhcp"]["config"]["state"] == "loaded"

    # Two changes while the path reloads: its next round loads the newest file, once.
    push(host, config(kea.sock, (A, "10.9.0.1"), (B, "10.9.0.2")))
    assert wait_for(lambda: status(host).get("state") == "loading", 5)
    push(host, config(kea.sock, (A, "10.9.0.1"), (C, "10.9.0.3")))
    push(host, config(kea.sock, (A, "10.9.0.1"), (C, "10.9.0.3"), (D, "10.9.0.4")))
    done = wait_for(lambda: served(host))
    assert (done["state"], done["seq"]) == ("loaded", 4), done
    assert reserved_in_kea(kea.sock) == [A, C, D]
    events = [json.loads(line)["event"] for line in host.log_file.read_text().splitlines()]
    assert events.count("deferred-loaded") == 3  # requests 1, 2, and 3 + 4 in one reload


def test_a_reload_kea_refuses_puts_back_the_file_it_accepted(tmp_path, kea):
    host = host_with(tmp_path, kea)
    good = config(kea.sock, (A, "10.9.0.1"))
    push(host, good)
    assert wait_for(lambda: served(host))["state"] == "loaded"
    # An address outside the subnet: the skeleton check passes (reservations are the
    # compiler's to validate), Kea refuses it at the reload and keeps what it ran.
    push(host, config(kea.sock, (A, "10.9.0.1"), (B, "10.8.0.2")))
    done = wait_for(lambda: served(host))
    assert done["state"] == "refused", done
    assert "10.8.0.2" in done["error"]
    assert reserved_in_kea(kea.sock) == [A]
    assert kea.conf.read_text() == good  # a Kea restart meets a file it accepts
    warning = health.collect(host, 0)["dhcp"]["config"]
    assert (warning["state"], warning["pending"]) == ("refused", False)


def test_a_failed_reload_is_tried_again_and_the_next_change_after_recovery_reaches_kea(
    tmp_path, kea
):
    host = host_with(tmp_path, kea)
    kea.stop()
    push(host, config(kea.sock, (A, "10.9.0.1")))  # Kea is down: the apply is not held up
    done = wait_for(lambda: served(host))
    assert done["state"] == "not-answering", done
    assert done["tries"] == 1
    assert deferred._held(host.run_dir / "deferred-kea-dhcp4.lock")  # still trying (2 s)
    kea.start()  # Kea reads the file the apply left (a restart never meets an older one)
    assert reserved_in_kea(kea.sock) == [A]
    again = wait_for(lambda: status(host).get("state") == "loaded" and status(host), 20)
    assert again, status(host)
    # The second change after the recovery reaches Kea through its reload.
    push(host, config(kea.sock, (A, "10.9.0.1"), (D, "10.9.0.4"), (E, "10.9.0.5")))
    done = wait_for(lambda: served(host))
    assert (done["state"], done["seq"]) == ("loaded", 2), done
    assert reserved_in_kea(kea.sock) == [A, D, E]


def test_the_check_of_an_apply_leaves_out_the_reservations(tmp_path, kea):
    host = host_with(tmp_path, kea)
    text = config(kea.sock, (A, "10.8.0.1"))
    assert "reservations" not in deferred.skeleton(text)
    apply.check_file(host, "kea-dhcp4", text)  # Kea's reload is the judge of reservations
    with pytest.raises(HelperError, match="not a Kea configuration"):
        apply.check_file(host, "kea-dhcp4", "{not json")
    broken = json.loads(text)
    broken["Dhcp4"]["subnet4"][0]["pools"] = [{"pool": "10.7.0.1 - 10.7.0.9"}]  # outside
    with pytest.raises(HelperError, match="check of kea-dhcp4 failed"):
        apply.check_file(host, "kea-dhcp4", json.dumps(broken))


def test_only_keas_file_may_be_deferred(tmp_path):
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({"unbound": {
        "path": "/tmp/u.conf", "check": ["true", "{file}"], "reload": ["true"],
        "deferred": True}}))  # fmt: skip
    with pytest.raises(HelperError, match="only kea-dhcp4"):
        load_artefacts(declared)


LEASE_CMDS = "/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so"


def with_lease_cmds(text: str) -> str:
    """`text` with lease_cmds and a lease file (a reload re-opens the lease database: leases
    kept in memory only would be gone)."""
    config = json.loads(text)
    config["Dhcp4"]["hooks-libraries"] = [{"library": LEASE_CMDS}]
    sock = Path(config["Dhcp4"]["control-socket"]["socket-name"])
    config["Dhcp4"]["lease-database"] = {"type": "memfile", "persist": True, "lfc-interval": 0,
                                         "name": str(sock.with_name("leases4.csv"))}  # fmt: skip
    return json.dumps(config)


def lease(sock: Path, address: str) -> str | None:
    """The MAC holding `address` in Kea, or None."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(json.dumps({"command": "lease4-get",
                              "arguments": {"ip-address": address}}).encode())  # fmt: skip
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    answer = json.loads(data)
    return answer["arguments"]["hw-address"] if answer["result"] == 0 else None


def add_lease(sock: Path, address: str, mac: str) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(json.dumps({"command": "lease4-add", "arguments": {
            "ip-address": address, "hw-address": mac, "subnet-id": 1}}).encode())  # fmt: skip
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    assert json.loads(data)["result"] == 0, data


@pytest.mark.skipif(not Path(LEASE_CMDS).exists(), reason="Kea's lease_cmds hook")
def test_a_reload_frees_the_lease_of_an_address_given_to_another_device(tmp_path):
    """The portal gives a removed device's address to the next device at once: after the
    reload, the old device's lease of it is gone (Kea would refuse the new owner until it ran
    out). Only the addresses whose reservation changed since the last loaded file are looked
    at (`{loaded}`); a lease on an unchanged reservation stays as it is."""
    server = Kea(tmp_path)
    server.conf.write_text(with_lease_cmds(config(server.sock, (A, "10.9.0.1"), (C, "10.9.0.3"))))
    server.start()
    try:
        declared = tmp_path / "artefacts.json"
        declared.write_text(json.dumps({"kea-dhcp4": {
            "path": str(server.conf), "check": ["kea-dhcp4", "-t", "{file}"], "mode": "0600",
            "reload": [KEA_CTL, "reload", "{file}", "{loaded}"], "deferred": True}}))  # fmt: skip
        host = Host(tmp_path / "state", "t", artefacts_file=declared)
        host.state_dir.mkdir()
        host.artefacts = load_artefacts(declared)
        first = with_lease_cmds(config(server.sock, (A, "10.9.0.1"), (C, "10.9.0.3")))
        push(host, first)
        assert wait_for(lambda: served(host))["state"] == "loaded"
        add_lease(server.sock, "10.9.0.1", A)
        add_lease(server.sock, "10.9.0.3", C)
        # C is removed; its address goes to D, and E gets a new one.
        push(host, with_lease_cmds(config(server.sock, (A, "10.9.0.1"), (D, "10.9.0.3"),
                                          (E, "10.9.0.5"))))  # fmt: skip
        done = wait_for(lambda: served(host))
        assert done["state"] == "loaded", done
        assert lease(server.sock, "10.9.0.3") is None  # D can have it now
        assert lease(server.sock, "10.9.0.1") == A  # untouched
        assert reserved_in_kea(server.sock) == [A, D, E]
    finally:
        server.stop()


@pytest.mark.skipif(not Path(LEASE_CMDS).exists(), reason="Kea's lease_cmds hook")
def test_kea_ctl_without_the_previous_file_frees_every_conflicting_lease(tmp_path):
    server = Kea(tmp_path)
    server.conf.write_text(with_lease_cmds(config(server.sock, (A, "10.9.0.1"))))
    server.start()
    try:
        add_lease(server.sock, "10.9.0.2", C)
        add_lease(server.sock, "10.9.0.1", A)
        server.conf.write_text(
            with_lease_cmds(config(server.sock, (A, "10.9.0.1"), (D, "10.9.0.2")))
        )
        done = subprocess.run([KEA_CTL, "reload", str(server.conf)], capture_output=True,
                              text=True, check=False, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["leases_deleted"] == 1
        assert lease(server.sock, "10.9.0.2") is None
        assert lease(server.sock, "10.9.0.1") == A
    finally:
        server.stop()


def test_loaded_is_a_placeholder_of_a_deferred_reload_only(tmp_path):
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({"portal-ra": {
        "path": "/tmp/r.json", "check": ["true", "{file}"],
        "reload": ["true", "{file}", "{loaded}"]}}))  # fmt: skip
    with pytest.raises(HelperError, match="deferred reload only"):
        load_artefacts(declared)
    declared.write_text(json.dumps({"kea-dhcp4": {
        "path": "/tmp/k.json", "check": ["true", "{file}"],
        "reload": ["true", "{file}", "x{loaded}"], "deferred": True}}))  # fmt: skip
    with pytest.raises(HelperError, match="only placeholder"):
        load_artefacts(declared)
    declared.write_text(json.dumps({"kea-dhcp4": {
        "path": "/tmp/k.json", "check": ["true", "{file}"],
        "reload": ["kea-ctl", "reload", "{file}", "{loaded}"], "deferred": True}}))  # fmt: skip
    spec = load_artefacts(declared)["kea-dhcp4"]
    assert spec.argv(spec.reload, spec.path) == ["kea-ctl", "reload", "/tmp/k.json"]
    assert spec.argv(spec.reload, spec.path, Path("/run/l")) == [
        "kea-ctl", "reload", "/tmp/k.json", "/run/l"]  # fmt: skip
