"""Lease rounds that cost what changed (issue 26): a real kea-dhcp4 (lease_cmds, a memfile lease
file, no interfaces) changes its leases at random; after every round, the history of a host read
with cursors (only Kea's appended lines) must be exactly the history of a host read in full
(lease4-get-all) from the same Kea; also across agent restarts, a Kea restart, Kea's lease file
cleanup (LFC: a new file; more in test_lease_lfc.py) and a round the portal did not store."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from apps.dhcp.models import Lease, LeaseCursor
from apps.dhcp.services import cursor_args, lease_round_store
from apps.firewall.models import FirewallHost
from portal_fw import kea
from portal_fw.bundle import load_artefacts
from portal_fw.host import Host

LEASE_CMDS = "/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so"
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not shutil.which("kea-dhcp4") or not Path(LEASE_CMDS).exists(),
        reason="kea-dhcp4-server (with lease_cmds) is installed by make test",
    ),
]

ROOT = Path(__file__).resolve().parents[3]
PORTAL_FW = ROOT / "deploy" / "firewall" / "portal-fw"
FIELDS = ("mac", "address", "hostname", "registration", "starts", "ends")
ADDRESSES = [f"10.9.0.{i}" for i in range(1, 41)]
NAMES = ["", "laptop", "a,b&c", "phone &#x2c x", "ünï"]


class Kea:
    """kea-dhcp4 in a temporary directory (no DHCP sockets: only its control socket)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sock, self.conf = tmp / "kea4.sock", tmp / "kea-dhcp4.conf"
        self.leases = tmp / "leases4.csv"
        self.env = {**os.environ, "KEA_PIDFILE_DIR": str(tmp), "KEA_LOCKFILE_DIR": str(tmp)}
        self.proc: subprocess.Popen | None = None
        self.write_config(lfc_interval=0)

    def write_config(self, lfc_interval: int) -> None:
        self.conf.write_text(json.dumps({"Dhcp4": {
            "interfaces-config": {"interfaces": []},
            "control-socket": {"socket-type": "unix", "socket-name": str(self.sock)},
            "lease-database": {"type": "memfile", "persist": True, "name": str(self.leases),
                               "lfc-interval": lfc_interval},
            "hooks-libraries": [{"library": LEASE_CMDS}],
            "subnet4": [{"id": 1, "subnet": "10.9.0.0/16"}],
        }}))  # fmt: skip

    def start(self) -> None:
        self.sock.unlink(missing_ok=True)
        with (self.tmp / "kea.log").open("ab") as log:  # its LFC lines are counted
            self.proc = subprocess.Popen(["kea-dhcp4", "-c", str(self.conf)], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 10
        while not self.sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.sock.exists(), "Kea did not open its control socket"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def ask(self, command: str, arguments: dict | None = None) -> dict:
        return kea.command(str(self.sock), command, arguments)

    def change(self, rng: random.Random, held: dict[str, str]) -> None:
        """One random change as Kea's clients and the portal make them: a new lease, a renewal
        (a later cltt, another lifetime), another name, another MAC on the address, a
        reclaimed lease, a deleted one."""
        address = rng.choice(ADDRESSES)
        now = int(time.time())
        if address not in held:
            mac = f"02:00:00:00:{rng.randrange(256):02x}:{rng.randrange(256):02x}"
            answer = self.ask("lease4-add", {"ip-address": address, "hw-address": mac,
                                             "subnet-id": 1, "hostname": rng.choice(NAMES),
                                             "valid-lft": rng.choice([120, 3600])})  # fmt: skip
            assert answer["result"] == 0, answer
            held[address] = mac
            return
        kind = rng.choice(["renew", "renew", "name", "mac", "reclaimed", "delete"])
        if kind == "delete":
            assert self.ask("lease4-del", {"ip-address": address})["result"] == 0
            del held[address]
            return
        update = {"ip-address": address, "hw-address": held[address], "subnet-id": 1,
                  "force-create": False}  # fmt: skip
        if kind == "renew":
            valid = rng.choice([120, 3600, 7200])
            update.update({"valid-lft": valid, "expire": now + rng.randrange(0, 600) + valid})
        elif kind == "name":
            update["hostname"] = rng.choice(NAMES)
        elif kind == "mac":
            update["hw-address"] = held[address] = f"02:00:00:01:00:{rng.randrange(256):02x}"
        else:
            update["state"] = 2  # expired-reclaimed: not a lease the portal keeps
        answer = self.ask("lease4-update", update)
        if answer["result"] == 1 and "a retry might succeed" in answer["text"]:
            # Kea 2.2 once refused an update this way right after the config-reloads around an
            # LFC, in a CI-like run ("failed to update the lease ... either because the lease
            # has been deleted or it has changed in the database, in both cases a retry might
            # succeed"); the lease was still held. The change is Kea's clients', not what the
            # test checks: it is then made as Kea suggests, and failing that as delete + add.
            for _ in range(3):
                time.sleep(0.1)
                answer = self.ask("lease4-update", update)
                if answer["result"] == 0:
                    break
            else:
                assert self.ask("lease4-del", {"ip-address": address})["result"] == 0
                answer = self.ask("lease4-add", {k: v for k, v in update.items()
                                                 if k != "force-create"})  # fmt: skip
        assert answer["result"] == 0, answer

    def reload(self) -> None:
        """config-reload; Kea refuses one while kea-lfc runs (it cannot load its lease files
        then): asked again until it is done."""
        deadline = time.monotonic() + 10
        while True:
            answer = self.ask("config-reload")
            if answer["result"] == 0:
                return
            assert "cleanup is in progress" in answer["text"], answer
            assert time.monotonic() < deadline, answer
            time.sleep(0.05)

    def lfcs(self) -> int:
        """How many lease file cleanups Kea started (its log: one line each)."""
        log = self.tmp / "kea.log"
        return log.read_bytes().count(b"DHCPSRV_MEMFILE_LFC_EXECUTE") if log.exists() else 0

    def wait_for_lfc(self) -> int:
        """Kea's lease file cleanup (lfc-interval 2 s until it ran, then 0): the lease file is
        renamed to `.1`, a new one started, and kea-lfc merges `.2` and `.1` into `.2`.
        Returns how many Kea ran (one, unless this process stalled for 2 s)."""
        before = self.lfcs()
        self.write_config(lfc_interval=2)
        self.reload()
        deadline = time.monotonic() + 30
        while self.lfcs() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        self.write_config(lfc_interval=0)
        self.reload()
        rotated = self.leases.with_name(self.leases.name + ".1")
        while rotated.exists() and time.monotonic() < deadline:  # kea-lfc still merging
            time.sleep(0.02)
        done = self.lfcs() - before
        assert done >= 1, "Kea ran no lease file cleanup"
        return done


@pytest.fixture
def server(tmp_path):
    k = Kea(tmp_path)
    k.start()
    yield k
    k.stop()


def agent_host(tmp: Path, conf: Path) -> Host:
    """The host side as one agent process sees it (a new one: an agent restart)."""
    declared = tmp / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {"path": str(conf), "check": ["true", "{file}"]}}))
    host = Host(tmp / "state", "t", artefacts_file=declared)
    host.artefacts = load_artefacts(declared)
    return host


def words_as_args(words: list[str]) -> dict:
    return {words[i][2:].replace("-", "_"): int(words[i + 1]) for i in range(0, len(words), 2)}


def history(name: str) -> list[tuple]:
    return sorted(Lease.objects.filter(host_name=name).values_list(*FIELDS))


def hosts() -> tuple[FirewallHost, FirewallHost]:
    a = FirewallHost.objects.create(name="rounds", address="10.255.255.21", serves_dhcp=True)
    b = FirewallHost.objects.create(name="full", address="10.255.255.22", serves_dhcp=True)
    return a, b


def one_round(agent: Host, rounds: FirewallHost, full: FirewallHost) -> dict:
    """The host `rounds` read from its cursor, the host `full` read in full (no cursor ever
    kept), both stored; their histories must be the same."""
    now = timezone.now()
    answer = kea.dhcp_leases(agent, words_as_args(cursor_args(rounds)))
    lease_round_store(host=rounds, data=json.loads(json.dumps(answer)), now=now)
    every = {"full": True, "leases": kea.leases(kea.kea_paths(agent, agent_conf(agent))[0])}
    lease_round_store(host=full, data={**every, "cursor": None}, now=now)
    assert history("rounds") == history("full")
    return answer


def agent_conf(agent: Host) -> Path:
    return agent.artefacts[kea.KEA_ARTEFACT].path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rounds_of_changes_leave_the_history_a_full_reading_leaves(server, tmp_path, seed):
    rng = random.Random(seed)  # noqa: S311 (reproducible changes)
    rounds, full = hosts()
    agent = agent_host(tmp_path, server.conf)
    first = one_round(agent, rounds, full)
    assert first["full"] is True
    assert first["cursor"] is not None
    held: dict[str, str] = {}
    sizes = []
    for _ in range(40):
        for _ in range(rng.choice([0, 0, 1, 2, 5, 12])):
            server.change(rng, held)
        answer = one_round(agent, rounds, full)
        assert answer["full"] is False, "a round from a cursor that fits reads the file"
        sizes.append(len(answer["leases"]) + len(answer["gone"]))
    assert 0 in sizes  # rounds with nothing changed
    assert max(sizes) > 3  # and with much
    assert len(history("rounds")) > 10
    nothing = kea.dhcp_leases(agent, words_as_args(cursor_args(rounds)))
    assert (nothing["full"], nothing["leases"], nothing["gone"]) == (False, [], [])
    # What Kea holds now is what the last round said it holds.
    kept = {lease["ip-address"] for lease in server.ask("lease4-get-all")["arguments"]["leases"]}
    assert kept == set(held)


def one_shot(tmp: Path, conf: Path, words: list[str]) -> dict:
    """dhcp-leases from a fresh agent process (the one-shot form: an agent restart each)."""
    declared = tmp / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {"path": str(conf), "check": ["true", "{file}"]}}))
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_ORIGINAL_COMMAND",
                                                             "SSH_CONNECTION")}  # fmt: skip
    out = subprocess.run(
        [sys.executable, str(PORTAL_FW), "--state-dir", str(tmp / "state"), "--artefacts",
         str(declared), "dhcp-leases", *words],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    answer = json.loads(out.stdout)
    assert answer["ok"], answer
    return answer


def test_agent_restarts_kea_restart_lfc_and_a_lost_round_converge(server, tmp_path):
    """The fault sequence: rounds from a new agent process each (agent restarts); Kea
    restarted (its lease file kept: rounds go on from the cursor); a round the portal did not
    store (asked again from the old cursor); Kea's LFC (a new file: the next round reads the old
    file's rest and the new file);
    a second agent restart after that recovery. After each round the two histories agree."""
    rng = random.Random(26)  # noqa: S311
    rounds, full = hosts()
    held: dict[str, str] = {}

    def shot_round() -> dict:
        now = timezone.now()
        answer = one_shot(tmp_path, server.conf, cursor_args(rounds))
        lease_round_store(host=rounds, data=answer, now=now)
        every = {"full": True, "leases": kea.leases(str(server.sock))}  # Kea itself
        lease_round_store(host=full, data={**every, "cursor": None}, now=now)
        assert history("rounds") == history("full")
        return answer

    for _ in range(10):
        server.change(rng, held)
    assert shot_round()["full"] is True  # no cursor yet
    for _ in range(6):
        server.change(rng, held)
    assert shot_round()["full"] is False  # a restarted agent goes on from the portal's cursor

    server.stop()  # Kea restarted: it reads its lease file again and appends to it
    server.start()
    for _ in range(6):
        server.change(rng, held)
    assert shot_round()["full"] is False

    for _ in range(6):
        server.change(rng, held)
    lost = one_shot(tmp_path, server.conf, cursor_args(rounds))  # answered, never stored
    assert lost["full"] is False
    assert lost["leases"]
    for _ in range(3):
        server.change(rng, held)
    again = shot_round()  # from the last stored cursor: the lost round's changes come again
    assert again["full"] is False
    assert {r[0] for r in lost["leases"]} <= {r[0] for r in again["leases"]} | set(again["gone"])

    assert server.wait_for_lfc() == 1
    for _ in range(6):
        server.change(rng, held)
    after_lfc = shot_round()  # the renamed file's rest (kept by the agent's link), the new file
    assert (after_lfc["full"], after_lfc["from"]) == (False, "rotated")
    assert LeaseCursor.objects.get(host=rounds).inode == server.leases.stat().st_ino

    for _ in range(8):  # recovered; then the second agent restart
        server.change(rng, held)
    assert shot_round()["full"] is False
    for _ in range(8):
        server.change(rng, held)
    assert shot_round()["full"] is False

    cursor = LeaseCursor.objects.get(host=rounds)  # a fingerprint that does not fit: Kea
    LeaseCursor.objects.filter(host=rounds).update(fingerprint=(cursor.fingerprint + 1) % 2**48)
    answer = shot_round()
    assert (answer["full"], answer["from"]) == (True, "kea")


def test_a_cursor_the_host_sends_is_checked_and_bad_arguments_are_refused(server, tmp_path):
    rounds, _full = hosts()
    agent = agent_host(tmp_path, server.conf)
    for bad in ([1, 2], [1, 2, 1 << 48], [1, -1, 3], ["1", 2, 3], [True, 2, 3]):
        lease_round_store(host=rounds, data={"full": True, "leases": [], "cursor": bad})
        assert not LeaseCursor.objects.filter(host=rounds).exists()
    answer = one_shot(tmp_path, server.conf, [])
    lease_round_store(host=rounds, data=answer)
    assert LeaseCursor.objects.filter(host=rounds).exists()
    from portal_fw.common import HelperError
    from portal_fw.verbs import validate

    with pytest.raises(HelperError, match="go together"):
        kea.dhcp_leases(agent, {"since_inode": 5})
    with pytest.raises(HelperError, match="since_check must be an integer"):
        validate("dhcp-leases", {"since_inode": 1, "since_offset": 1, "since_check": 1 << 48})


def test_collect_full_forgets_every_cursor(server, tmp_path):
    """`manage.py dhcp_leases_collect --full`: the next reading of every host is a full one."""
    from io import StringIO

    from django.core.management import call_command

    rounds, _full = hosts()
    FirewallHost.objects.update(enabled=False)  # nothing to reach over SSH here
    lease_round_store(host=rounds, data=one_shot(tmp_path, server.conf, []))
    assert cursor_args(rounds)
    out = StringIO()
    call_command("dhcp_leases_collect", "--full", stdout=out)
    assert "no enabled host serves DHCP" in out.getvalue()
    assert cursor_args(rounds) == []
