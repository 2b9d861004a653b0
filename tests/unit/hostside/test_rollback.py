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
    assert [p.name for p in host.state_dir.glob("rp-*")] == [os.readlink(point)]  # old one gone


def test_nft_current_is_only_trusted_when_complete(host):
    assert host.nft_current_valid()
    with open(host.nft_current, "a") as fh:
        fh.write("# torn\n")
    assert not host.nft_current_valid()
    host.set_nft_current(host.nft_current, append="add element inet portal_fw s { 1.2.3.4 }")
    assert host.nft_current_valid()
    assert host.nft_current.read_text().endswith("add element inet portal_fw s { 1.2.3.4 }\n")


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
