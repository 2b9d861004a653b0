"""The bundle: every artefact of a host, one hash over all of them."""

from __future__ import annotations

import pytest

from tests.unit.ruleset.builders import make_snapshot
from workers.ruleset import bundle as bundle_mod
from workers.ruleset import compile_bundle, compile_snapshot
from workers.ruleset.bundle import bundle_hash, bundle_of, file_artefact


def test_the_bundle_carries_nft_and_tc_and_hashes_both():
    snapshot = make_snapshot()
    bundle = compile_bundle(snapshot)
    compiled = compile_snapshot(snapshot)
    assert bundle.artefacts == {"nft": compiled.nft, "tc": compiled.tc}
    assert bundle == compile_bundle(snapshot)  # equal input, equal bundle and hash
    assert bundle.content_hash == bundle_hash({"nft": compiled.nft, "tc": compiled.tc})
    assert set(bundle.artefact_hashes) == {"nft", "tc"}


def test_every_artefact_changes_the_hash():
    compiled = compile_snapshot(make_snapshot())
    base = bundle_of(compiled, {"kea-dhcp4": "{}"})
    other = bundle_of(compiled, {"kea-dhcp4": "{ }"})
    assert base.content_hash != other.content_hash
    assert base.artefact_hashes["nft"] == other.artefact_hashes["nft"]
    assert base.artefact_hashes["kea-dhcp4"] != other.artefact_hashes["kea-dhcp4"]
    # Name and text are framed: moving text between two files is a different bundle.
    assert bundle_hash({"a": "xy", "b": ""}) != bundle_hash({"a": "x", "b": "y"})


def test_registered_converters_add_their_files(monkeypatch):
    monkeypatch.setattr(bundle_mod, "_FILE_CONVERTERS", {})
    file_artefact("demo-conf")(lambda snap: f"host {snap.host.name}\n")
    file_artefact("not-here")(lambda snap: None)  # this host does not run it
    bundle = compile_bundle(make_snapshot())
    assert dict(bundle.files) == {"demo-conf": f"host {make_snapshot().host.name}\n"}


@pytest.mark.parametrize("name", ["nft", "tc", "9lives", "bad name", ""])
def test_artefact_names_are_checked(name):
    with pytest.raises(ValueError, match="bad artefact name"):
        file_artefact(name)
