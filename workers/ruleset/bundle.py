"""A host's bundle: every artefact one host runs, compiled from one snapshot, versioned as one.

Artefacts by name:

* ``nft``: the nftables transaction (`render`), applied with ``nft -f`` (or as an increment);
* ``tc``: the ``tc -batch`` shaping set-up (or the class changes of an increment);
* configuration files (Kea, keepalived, conntrackd, ...): one text each, produced by a converter
  registered with `file_artefact`. The host's helper declares, per name, where the file lives,
  how it is checked (``kea-dhcp4 -t``, ``keepalived -t``) and how the service reloads it; the
  pipeline moves them without knowing what they are.

The bundle's hash covers every artefact (name, length and text), so it changes when any of them
does and equal input gives an equal hash. `artefact_hashes` tell which artefacts differ between
two versions (the version list and the rollback confirmation show them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workers.ruleset.build import build
from workers.ruleset.diff import Incremental, diff
from workers.ruleset.ha import conntrackd_config, keepalived_config
from workers.ruleset.kea import kea_config, ra_config
from workers.ruleset.render import Compiled, render
from workers.ruleset.snapshot import Snapshot
from workers.ruleset.values import SnapshotError

NFT = "nft"
TC = "tc"
RESERVED = frozenset({NFT, TC})
FileConverter = Callable[[Snapshot], str | None]
_FILE_CONVERTERS: dict[str, FileConverter] = {}


def file_artefact(name: str) -> Callable[[FileConverter], FileConverter]:
    """Register a converter Snapshot -> config text (None: this host does not run it)."""
    if name in RESERVED or not name.replace("-", "").isalnum() or not name[:1].isalpha():
        raise ValueError(f"bad artefact name {name!r}")

    def register(converter: FileConverter) -> FileConverter:
        _FILE_CONVERTERS[name] = converter
        return converter

    return register


file_artefact("kea-dhcp4")(kea_config)
file_artefact("portal-ra")(ra_config)
file_artefact("keepalived")(keepalived_config)
file_artefact("conntrackd")(conntrackd_config)


def artefact_hash(text: str) -> str:
    """sha256 of one artefact's text."""
    return hashlib.sha256(text.encode()).hexdigest()


def bundle_hash(artefacts: Mapping[str, str]) -> str:
    """The version of a bundle: sha256 over every artefact's name, length and text, by name."""
    return _bundle_hash_bytes({name: text.encode() for name, text in artefacts.items()})


def _bundle_hash_bytes(encoded: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(encoded):
        data = encoded[name]
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Bundle:
    """Everything one host runs: the compiled rule set and shaping, and configuration files."""

    compiled: Compiled
    files: tuple[tuple[str, str], ...] = ()
    content_hash: str = ""
    artefact_hashes: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def artefacts(self) -> dict[str, str]:
        """Every artefact's text by name."""
        return {NFT: self.compiled.nft, TC: self.compiled.tc, **dict(self.files)}


def bundle_of(compiled: Compiled, files: Mapping[str, str] | None = None) -> Bundle:
    """Wrap a compiled rule set and configuration files into a hashed bundle."""
    ordered = tuple(sorted((files or {}).items()))
    for name, _text in ordered:
        if name in RESERVED:
            raise SnapshotError(f"artefact name {name!r} is reserved")
    artefacts = {NFT: compiled.nft, TC: compiled.tc, **dict(ordered)}
    # Each text encoded once for both hashes (16 MB per host at 20,000 members).
    encoded = {name: text.encode() for name, text in artefacts.items()}
    return Bundle(
        compiled,
        ordered,
        _bundle_hash_bytes(encoded),
        {name: hashlib.sha256(data).hexdigest() for name, data in encoded.items()},
    )


def compile_bundle(snapshot: Snapshot) -> Bundle:
    """The bundle of one host: its rule set and shaping plus every registered file artefact
    that applies to it."""
    compiled = render(build(snapshot))
    files = {}
    for name, converter in sorted(_FILE_CONVERTERS.items()):
        text = converter(snapshot)
        if text is not None:
            files[name] = text
    return bundle_of(compiled, files)


def increment_from_stored(
    previous_snapshot_json: str | bytes, previous_hash: str, new: Compiled
) -> Incremental | None:
    """The increment from a stored version (its `Snapshot.to_json()` and bundle hash) to the
    compiled rule set `new`; None when the stored snapshot no longer compiles to that bundle
    (the compiler changed since: no safe base) or the structure differs."""
    rebuilt = compile_bundle(Snapshot.from_json(previous_snapshot_json))
    if rebuilt.content_hash != previous_hash:
        return None
    return diff(rebuilt.compiled, new)


__all__ = [
    "NFT",
    "TC",
    "Bundle",
    "artefact_hash",
    "bundle_hash",
    "bundle_of",
    "compile_bundle",
    "file_artefact",
    "increment_from_stored",
]
