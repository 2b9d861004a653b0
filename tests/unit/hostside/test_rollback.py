"""portal_fw.rollback and host: the one rollback point's files, its switch, the timer's rules
(without nft or tc: a point whose nft text is nft.current and with no shaping)."""

from __future__ import annotations

import json
import os

import pytest

from portal_fw import rollback
from portal_fw.bundle import load_artefacts
from portal_fw.common import HelperError
from portal_fw.host import Host


@pytest.fixture
def host(tmp_path) -> Host:
    state = tmp_path / "state"
    state.mkdir()
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "demo.json").write_text('{"v": 1}\n')
    declared = tmp_path / "artefacts.json"
    declared.write_text(json.dumps({
        "demo": {"path": str(etc / "demo.json"), "check": ["true", "{file}"]},
        "gone": {"path": str(etc / "gone.json"), "check": ["true", "{file}"]},
    }))  # fmt: skip
    h = Host(state, "t", artefacts_file=declared)
    h.artefacts = load_artefacts(declared)
    (state / "upload.nft").write_text("table inet portal_fw {\n}\n")
    h.set_nft_current(state / "upload.nft")
    h.write_json(h.state_file, {"version": "v1", "confirmed": True})
    return h


def test_a_point_holds_nft_files_and_state_and_is_switched_by_one_link(host):
    answer = rollback.capture(host, devices=[])
    assert answer["nft_source"] == "nft.current"
    point = host.rollback_dir
    assert point.is_symlink()
    assert os.readlink(point).startswith("rp-")
    assert (point / "nft.nft").read_text() == "table inet portal_fw {\n}\n"
    assert os.stat(point / "nft.nft").st_ino == os.stat(host.nft_current).st_ino  # a hard link
    meta = json.loads((point / "meta.json").read_text())
    assert meta["files"] == {"demo": {"present": True}, "gone": {"present": False}}
    assert (point / "files" / "demo").read_text() == '{"v": 1}\n'
    assert meta["state"] == {"version": "v1", "confirmed": True}
    assert meta["tc"] == {"current": False, "devices": [], "canon": {}}
    first = os.readlink(point)
    rollback.capture(host, devices=[])
    assert os.readlink(point) != first
    assert len(list(host.run_dir.glob("rp-*"))) == 2  # the old one goes after the answer
    host.run_later()
    assert [p.name for p in host.run_dir.glob("rp-*")] == [os.readlink(point)]


def test_nft_current_is_only_trusted_when_complete(host):
    assert host.nft_record() == (len("table inet portal_fw {\n}\n"), 0)
    with open(host.nft_current, "a") as fh:
        fh.write("# torn\n")
    assert not host.nft_current_valid()


INC1 = "add element inet portal_fw s { 1.2.3.4 }\n"
INC2 = "delete element inet portal_fw s { 1.2.3.4 }\n"


def test_an_increment_is_appended_to_the_journal_and_a_point_keeps_its_own_length(host):
    base = host.nft_current.stat().st_size
    host.journal_end(host.journal_begin(INC1), loaded=True)
    assert host.nft_record() == (base, len(INC1))
    rollback.capture(host, devices=[])
    point = host.rollback_dir
    meta = json.loads((point / "meta.json").read_text())
    assert meta["nft_journal_bytes"] == len(INC1)
    host.journal_end(host.journal_begin(INC2), loaded=True)  # after the point: not its part
    assert host.nft_journal.read_text() == INC1 + INC2
    assert (point / "nft.journal").read_bytes()[: meta["nft_journal_bytes"]] == INC1.encode()
    assert host.nft_current.stat().st_size == base  # the base is not rewritten per change


def test_a_refused_increment_leaves_the_record_and_a_death_in_between_makes_it_unknown(host):
    record = host.nft_record()
    host.journal_end(host.journal_begin(INC1), loaded=False)  # refused by the kernel
    assert host.nft_record() == record
    assert host.nft_journal.read_text() == ""
    host.journal_begin(INC1)  # the agent dies before the answer of the load is recorded
    assert host.nft_record() is None  # the next point is a dump, not a guess
    assert host.journal_begin(INC2) is None  # and nothing is appended to an unknown text


def test_a_long_journal_is_folded_into_the_base_after_the_answer(host, monkeypatch):
    from portal_fw import host as host_module

    monkeypatch.setattr(host_module, "JOURNAL_COMPACT_BYTES", 10)
    text = host.nft_current.read_text()
    host.journal_end(host.journal_begin(INC1), loaded=True)
    rollback.capture(host, devices=[])
    old_journal = host.nft_journal.stat().st_ino
    host.compact_nft_journal()
    assert host.nft_current.read_text() == text + INC1
    assert host.nft_record() == (len(text + INC1), 0)
    # The point still holds the text it recorded: its links are to the old files.
    point = host.rollback_dir
    assert (point / "nft.nft").read_text() == text
    assert os.stat(point / "nft.journal").st_ino == old_journal


def test_volatile_files_live_in_the_run_directory(tmp_path):
    h = Host(tmp_path / "state", "t", run_dir=tmp_path / "run")
    assert h.state_file.parent == h.pending_file.parent == h.nft_current.parent == tmp_path / "run"
    assert h.log_file.parent == h.acct_file.parent == h.lock_file.parent == tmp_path / "state"
    assert h.timer_argv("tok")[-3:-2] == [str(tmp_path / "run")]


def test_rolling_back_without_a_point_is_a_conflict(tmp_path):
    with pytest.raises(HelperError) as caught:
        rollback.rollback_now(Host(tmp_path, "t"), "test")
    assert (caught.value.kind, caught.value.code) == ("conflict", 3)


def test_the_timer_leaves_a_confirmed_or_superseded_apply_alone(host):
    assert rollback.timer(host, "token-a") == 0  # nothing pending: confirmed already
    host.write_json(host.pending_file, {"token": "token-b", "deadline": 0})
    assert rollback.timer(host, "token-a") == 0  # another apply's timer owns it
    assert host.pending_file.exists()


def test_the_timer_runs_the_agent_package_in_its_own_session(host):
    argv = host.timer_argv("tok")
    assert argv[1:3] == ["-I", "-S"]
    assert "from portal_fw import agent" in argv[4]
    assert argv[-2:] == ["--internal-rollback-timer", "tok"]
    assert "--artefacts" in argv


def test_an_apply_that_could_not_start_restores_the_pending_state(host, monkeypatch):
    from portal_fw import apply

    started: list[str] = []
    monkeypatch.setattr(host, "arm_timer", lambda token: started.append(token) or 4242)
    host.write_json(host.pending_file, {"token": "old", "deadline": 9e9, "confirm_within": 30})
    armed = apply.Armed(host, "v2", 30, set())
    assert armed.point["kept"] is True
    assert host.read_json(host.pending_file)["token"] == armed.pending["token"]
    armed.take_back()  # a refused element increment: nothing changed
    pending = host.read_json(host.pending_file)
    assert pending["token"] == "old"
    assert started == [armed.pending["token"], "old"]  # the old apply's timer armed again
