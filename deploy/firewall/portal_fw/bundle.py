"""The bundle (apply-bundle's input) and the file artefacts a host declares.

Root-owned host configuration (``--artefacts FILE``) declares which configuration files a
bundle may carry, where they go, how each is checked and reloaded (argv lists, never a shell,
``{file}`` the placeholder, and in a deferred artefact's reload ``{loaded}``: the last file it
loaded, left out when there is none). The bundle itself is validated strictly; any problem is a
refusal and nothing changes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .common import JSON, HelperError, refused

ARTEFACT_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
RESERVED_ARTEFACTS = frozenset({"nft", "tc"})
FILE_ARTEFACT_KEYS = frozenset({"path", "check", "reload", "mode", "deferred"})
DEFERRABLE = frozenset({"kea-dhcp4"})  # whose check can leave out what the portal validated
PLACEHOLDER = "{file}"
LOADED = "{loaded}"  # a deferred reload's last loaded file (deferred.py); the word is left out
# when there is none


class FileArtefact:
    """A config file the agent writes for the portal: where, how to check it, how to reload."""

    __slots__ = ("check", "deferred", "mode", "name", "path", "reload")

    def __init__(
        self,
        name: str,
        path: Path,
        check: tuple[str, ...],
        reload: tuple[str, ...],
        mode: int,
        deferred: bool = False,
    ) -> None:
        self.name, self.path, self.check, self.reload, self.mode = name, path, check, reload, mode
        self.deferred = deferred  # reloaded on its own path after the answer (deferred.py)

    def argv(self, which: tuple[str, ...], file: Path, loaded: Path | None = None) -> list[str]:
        """`which` with {file} put in; {loaded} (a word of its own) becomes `loaded`, or the
        word is left out without one."""
        return [
            str(loaded) if word == LOADED else word.replace(PLACEHOLDER, str(file))
            for word in which
            if word != LOADED or loaded is not None
        ]


def _config_error(message: str) -> HelperError:
    return refused(f"--artefacts: {message}; fix the host's artefact configuration")


def _argv_list(
    name: str, key: str, value: Any, *, need_file: bool, loaded_ok: bool = False
) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(w, str) for w in value):
        raise _config_error(f"{name}.{key} must be a non-empty list of strings (an argv)")
    if any(not w or "\x00" in w for w in value):
        raise _config_error(f"{name}.{key}: empty word or NUL byte")
    if "/" in value[0] and not value[0].startswith("/"):
        raise _config_error(f"{name}.{key}: the program is a bare name or an absolute path")
    for word in value:
        if loaded_ok and word == LOADED:
            continue
        if "{" in word.replace(PLACEHOLDER, "") or "}" in word.replace(PLACEHOLDER, ""):
            raise _config_error(
                f"{name}.{key}: {PLACEHOLDER} is the only placeholder"
                + (f" (and {LOADED}, as a word of its own)" if loaded_ok else "")
            )
    if need_file and not any(PLACEHOLDER in w for w in value):
        raise _config_error(f"{name}.{key} must name the file to check with {PLACEHOLDER}")
    return tuple(value)


def load_artefacts(path: Path | None) -> dict[str, FileArtefact]:
    """Parse and validate the ``--artefacts`` JSON (absent: no file artefacts)."""
    if path is None:
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _config_error(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise _config_error("the file must hold one JSON object {name: {...}}")
    artefacts: dict[str, FileArtefact] = {}
    seen_paths: set[Path] = set()
    for name, spec in raw.items():
        if not isinstance(name, str) or not ARTEFACT_NAME.fullmatch(name):
            raise _config_error(f"artefact name {name!r} must match {ARTEFACT_NAME.pattern}")
        if name in RESERVED_ARTEFACTS:
            raise _config_error(f"artefact name {name!r} is reserved")
        if not isinstance(spec, dict):
            raise _config_error(f"{name}: must be an object")
        unknown = set(spec) - FILE_ARTEFACT_KEYS
        if unknown:
            raise _config_error(f"{name}: unknown key(s) {sorted(unknown)}")
        target = spec.get("path")
        if not isinstance(target, str) or not target.startswith("/") or "\x00" in target:
            raise _config_error(f"{name}.path must be an absolute path")
        norm = Path(os.path.normpath(target))
        if str(norm) != target or target.endswith("/"):
            raise _config_error(f"{name}.path must be normalised (no '..', '//', trailing '/')")
        if norm in seen_paths:
            raise _config_error(f"{name}.path is declared twice")
        seen_paths.add(norm)
        if "check" not in spec:
            raise _config_error(f"{name}.check is required (an argv with {PLACEHOLDER})")
        check = _argv_list(name, "check", spec["check"], need_file=True)
        reload_ = (
            _argv_list(name, "reload", spec["reload"], need_file=False, loaded_ok=True)
            if spec.get("reload") is not None
            else ()
        )
        mode_text = spec.get("mode", "0644")
        if not isinstance(mode_text, str) or not re.fullmatch(r"0?[0-7]{3}", mode_text):
            raise _config_error(f'{name}.mode must be an octal string such as "0640"')
        deferred = spec.get("deferred", False)
        if not isinstance(deferred, bool):
            raise _config_error(f"{name}.deferred must be true or false")
        if deferred and (name not in DEFERRABLE or not reload_):
            raise _config_error(
                f"{name}.deferred: only {', '.join(sorted(DEFERRABLE))} with a reload command"
            )
        if LOADED in reload_ and not deferred:
            raise _config_error(f"{name}.reload: {LOADED} is for a deferred reload only")
        artefacts[name] = FileArtefact(name, norm, check, reload_, int(mode_text, 8), deferred)
    return artefacts


BUNDLE_KEYS = frozenset({"format", "version", "artefacts"})
BUNDLE_ARTEFACT_KEYS = frozenset({"mode", "text"})
BUNDLE_MODES = ("replace", "increment")


def parse_bundle(raw: Any, declared: dict[str, FileArtefact]) -> JSON:
    """Validate the bundle strictly (a parsed JSON value, or its text); any problem is a
    refusal, nothing changed. Returns the bundle: {"format", "version", "artefacts"}."""
    bundle = raw
    if isinstance(raw, str):
        try:
            bundle = json.loads(raw)
        except ValueError as exc:
            raise refused(f"bundle: not valid JSON ({exc})") from exc
    if not isinstance(bundle, dict):
        raise refused("bundle: must be one JSON object")
    if set(bundle) != BUNDLE_KEYS:
        unknown, missing = set(bundle) - BUNDLE_KEYS, BUNDLE_KEYS - set(bundle)
        raise refused(
            "bundle: "
            + "; ".join(
                ([f"unknown key(s) {sorted(unknown)}"] if unknown else [])
                + ([f"missing key(s) {sorted(missing)}"] if missing else [])
            )
        )
    if type(bundle["format"]) is not int or bundle["format"] != 1:
        raise refused("bundle: format must be 1")
    if not isinstance(bundle["version"], str) or not re.fullmatch(
        r"[0-9a-f]{64}", bundle["version"]
    ):
        raise refused("bundle: version must be 64 lowercase hex digits (the bundle hash)")
    artefacts = bundle["artefacts"]
    if not isinstance(artefacts, dict):
        raise refused("bundle: artefacts must be an object {name: {mode, text}}")
    for name, art in artefacts.items():
        if name not in RESERVED_ARTEFACTS and name not in declared:
            raise refused(
                f"bundle: artefact {name!r} is not declared on this host (declared: "
                f"{', '.join(['nft', 'tc', *sorted(declared)])})"
            )
        if not isinstance(art, dict) or set(art) != BUNDLE_ARTEFACT_KEYS:
            raise refused(f'bundle: artefact {name!r} must be exactly {{"mode", "text"}}')
        modes = BUNDLE_MODES if name in RESERVED_ARTEFACTS else ("replace",)
        if art["mode"] not in modes:
            raise refused(f"bundle: artefact {name!r}: mode must be one of {', '.join(modes)}")
        if not isinstance(art["text"], str):
            raise refused(f"bundle: artefact {name!r}: text must be a string")
        if "\x00" in art["text"]:
            raise refused(f"bundle: artefact {name!r}: NUL byte in text")
    return bundle
