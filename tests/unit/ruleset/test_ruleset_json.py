"""Snapshot.to_json / from_json: deterministic, compact, validated, and a lossless round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bench.synthetic import synthetic_snapshot
from tests.unit.ruleset.builders import make_small_members, make_snapshot
from tests.unit.ruleset.strategies import snapshots
from workers.ruleset import compile_snapshot, diff, diff_stored
from workers.ruleset import snapshot as s


@settings(max_examples=100, deadline=None)
@given(snap=snapshots())
def test_round_trip_is_lossless_and_deterministic(snap: s.Snapshot) -> None:
    text = snap.to_json()
    back = s.Snapshot.from_json(text)
    assert back == snap
    assert back.to_json() == text
    assert s.Snapshot.from_json(text.encode()) == snap
    assert compile_snapshot(back).content_hash == compile_snapshot(snap).content_hash


@settings(max_examples=40, deadline=None)
@given(pair=st.tuples(snapshots(max_members=4), snapshots(max_members=4)))
def test_diff_from_stored_json_matches_diff_from_objects(
    pair: tuple[s.Snapshot, s.Snapshot],
) -> None:
    a, b = pair
    old, new = compile_snapshot(a), compile_snapshot(b)
    assert diff_stored(a.to_json(), old.content_hash, new) == diff(old, new)


def test_equal_snapshots_give_identical_text() -> None:
    a = make_snapshot()
    b = make_snapshot(tuple(reversed(make_small_members())))
    assert a.to_json() == b.to_json()
    assert a.to_json().isascii()
    assert " " not in a.to_json()


def test_descriptions_are_not_stored(small_snapshot: s.Snapshot) -> None:
    assert "quoted" not in small_snapshot.to_json()


def test_compact_at_scale() -> None:
    text = synthetic_snapshot(1000).to_json()
    assert len(text) < 400 * 1000  # under 400 bytes per member (3 devices, 5 forwards)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format=2), "not format 1"),
        (lambda d: d.pop("host"), "KeyError"),
        (lambda d: d["members"][0].__setitem__(1, "198.51.100.300"), "is not an IP address"),
        (lambda d: d["members"][0][3][0].__setitem__(2, 0), "port forward #1 public ports"),
        (lambda d: d["members"][0][3][0].__setitem__(1, "icmp"), "protocol 'icmp'"),
        (lambda d: d["members"][0].__setitem__(2, [[10, "10.100.0.10", ["::1%eth0"]]]), "scope id"),
        (lambda d: d["members"].append([1]), "member #1 appears twice"),
    ],
)
def test_from_json_validates(small_snapshot: s.Snapshot, mutate: object, message: str) -> None:
    doc = json.loads(small_snapshot.to_json())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(s.SnapshotError, match=message):
        s.Snapshot.from_json(json.dumps(doc))


def test_from_json_refuses_garbage() -> None:
    with pytest.raises(s.SnapshotError, match="snapshot json"):
        s.Snapshot.from_json("{not json")
    with pytest.raises(s.SnapshotError, match="not format"):
        s.Snapshot.from_json("[]")


def test_to_json_with_reused_member_rows_is_the_whole_documents_dump():
    import dataclasses
    import json

    from tests.unit.ruleset.builders import make_snapshot
    from workers.ruleset import snapshot as sm

    def reference(snap):
        doc = json.loads(sm.snapshot_to_json(snap))  # the fields, then dumped in one piece
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=True)

    first = make_snapshot()
    assert first.to_json() == reference(first)
    members = list(first.members)
    members[0] = dataclasses.replace(members[0], shaping=sm.Shaping(8000, 2000))
    second = make_snapshot(members=tuple(members))
    text = second.to_json()  # all but one row from the cache of the call before
    assert text == reference(second)
    assert sm.Snapshot.from_json(text) == second
    assert '"members":[[' in text
