"""portal_fw.bundle: the bundle is validated strictly; the host's artefact declaration too."""

from __future__ import annotations

import json

import pytest

from portal_fw.bundle import load_artefacts, parse_bundle
from portal_fw.common import HelperError

VERSION = "a" * 64
DECLARED = load_artefacts(None)


def bundle(**overrides):
    body = {"format": 1, "version": VERSION, "artefacts": {"nft": {"mode": "replace", "text": ""}}}
    body.update(overrides)
    return body


def test_a_good_bundle_comes_back_as_it_was_sent_text_or_parsed():
    assert parse_bundle(bundle(), DECLARED) == bundle()
    assert parse_bundle(json.dumps(bundle()), DECLARED) == bundle()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ([], "one JSON object"),
        (bundle(extra=1), "unknown key"),
        ({"format": 1, "version": VERSION}, "missing key"),
        (bundle(format=2), "format must be 1"),
        (bundle(format=True), "format must be 1"),
        (bundle(version="ABC"), "64 lowercase hex"),
        (bundle(artefacts=[]), "artefacts must be an object"),
        (bundle(artefacts={"kea-dhcp4": {"mode": "replace", "text": ""}}), "not declared"),
        (bundle(artefacts={"nft": {"mode": "sideways", "text": ""}}), "mode must be"),
        (bundle(artefacts={"nft": {"mode": "replace", "text": "", "x": 1}}), "exactly"),
        (bundle(artefacts={"nft": {"mode": "replace", "text": 3}}), "must be a string"),
        (bundle(artefacts={"tc": {"mode": "replace", "text": "a\x00"}}), "NUL"),
    ],
)
def test_a_malformed_bundle_is_refused(raw, message):
    with pytest.raises(HelperError) as caught:
        parse_bundle(raw, DECLARED)
    assert caught.value.kind == "refused"
    assert message in caught.value.message


def test_declared_files_may_only_be_replaced(tmp_path):
    declared = tmp_path / "artefacts.json"
    declared.write_text(
        json.dumps({"demo": {"path": "/etc/demo.json", "check": ["true", "{file}"]}})
    )
    files = load_artefacts(declared)
    assert files["demo"].mode == 0o644
    assert files["demo"].argv(files["demo"].check, tmp_path / "x") == ["true", str(tmp_path / "x")]
    art = {"demo": {"mode": "increment", "text": "{}"}}
    with pytest.raises(HelperError, match="mode must be one of replace"):
        parse_bundle(bundle(artefacts=art), files)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"nft": {"path": "/tmp/x", "check": ["true", "{file}"]}}, "reserved"),
        ({"Bad": {"path": "/tmp/x", "check": ["true", "{file}"]}}, "must match"),
        ({"a": {"path": "tmp/x", "check": ["true", "{file}"]}}, "absolute"),
        ({"a": {"path": "/tmp/../x", "check": ["true", "{file}"]}}, "normalised"),
        ({"a": {"path": "/tmp/x", "check": "true {file}"}}, "argv"),
        ({"a": {"path": "/tmp/x", "check": ["true", "{path}"]}}, "only placeholder"),
        ({"a": {"path": "/tmp/x", "check": ["true"]}}, "must name the file"),
        ({"a": {"path": "/tmp/x"}}, "required"),
        ({"a": {"path": "/tmp/x", "check": ["true", "{file}"], "mode": "rw"}}, "octal"),
        ({"a": {"path": "/tmp/x", "check": ["true", "{file}"], "owner": "x"}}, "unknown"),
    ],
)
def test_a_malformed_declaration_is_refused_naming_the_option(tmp_path, config, message):
    path = tmp_path / "artefacts.json"
    path.write_text(json.dumps(config))
    with pytest.raises(HelperError) as caught:
        load_artefacts(path)
    assert "--artefacts" in caught.value.message
    assert message in caught.value.message
