"""The verb table: every request the agent answers, with its arguments as typed values.

A request names a verb from this table and gives its arguments as a JSON object; each argument
is checked for its type and range before the verb runs (unknown ones are refused). The portal
calls apply-bundle, confirm, rollback, health, traffic, dhcp-leases and ha-resync; version,
digest and help are operator verbs (run them on the host: ``portal-fw --state-dir ... version``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from . import apply, health, kea, leasefile, traffic
from .common import JSON, refused
from .host import Host

MAX_CONFIRM_WITHIN = 3600


class Arg(NamedTuple):
    """One argument: an int in lo..hi, or a flag (bool)."""

    kind: type
    lo: int = 0
    hi: int = 0
    required: bool = False


class Verb(NamedTuple):
    run: Callable[[Host, JSON], JSON]
    args: dict[str, Arg]
    takes_input: bool = False  # apply-bundle: the bundle
    operator: bool = False  # not called by the portal


def _help(host: Host, args: JSON) -> JSON:
    return {
        "verbs": {
            name: {"args": sorted(verb.args), "input": verb.takes_input, "operator": verb.operator}
            for name, verb in sorted(VERBS.items())
        }
    }


VERBS: dict[str, Verb] = {
    "apply-bundle": Verb(
        apply.apply_bundle,
        {
            "confirm_within": Arg(int, 1, MAX_CONFIRM_WITHIN, required=True),
            "health_sample_ms": Arg(int, 0, 2000),
        },
        takes_input=True,
    ),
    "confirm": Verb(apply.confirm, {}),
    "rollback": Verb(apply.rollback_verb, {}),
    "health": Verb(health.health, {"sample_ms": Arg(int, 0, 2000), "no_digest": Arg(bool)}),
    "traffic": Verb(traffic.traffic, {}),
    "dhcp-leases": Verb(
        kea.dhcp_leases,
        {
            "since_inode": Arg(int, 0, (1 << 63) - 1),
            "since_offset": Arg(int, 0, (1 << 62) - 1),
            "since_check": Arg(int, 0, leasefile.CURSOR_CHECK_MAX),
        },
    ),
    "ha-resync": Verb(health.ha_resync, {}),
    "version": Verb(apply.version, {}, operator=True),
    "digest": Verb(apply.digest_verb, {}, operator=True),
    "help": Verb(_help, {}, operator=True),
}


def validate(verb: str, args: Any) -> JSON:
    """The verb's arguments as typed values; anything else is a refusal naming the problem."""
    if verb not in VERBS:
        raise refused(f"{verb!r} is not a verb of this agent; it answers: {', '.join(VERBS)}")
    spec = VERBS[verb].args
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise refused(f"{verb}: args must be an object")
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise refused(f"{verb}: unknown argument(s) {', '.join(map(str, unknown))}")
    out: JSON = {}
    for name, arg in spec.items():
        if name not in args:
            if arg.required:
                raise refused(f"{verb}: {name} is required")
            continue
        value = args[name]
        if arg.kind is bool:
            if not isinstance(value, bool):
                raise refused(f"{verb}: {name} must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int) or not arg.lo <= value <= arg.hi:
            raise refused(f"{verb}: {name} must be an integer {arg.lo}..{arg.hi}")
        out[name] = value
    return out


def args_from_words(verb: str, words: list[str]) -> JSON:
    """Command-line words (``--confirm-within 30 --no-digest``) as the argument object of
    `validate` (the one-shot form, for operators on the host and one-off SSH commands)."""
    spec = VERBS[verb].args if verb in VERBS else {}
    args: JSON = {}
    i = 0
    while i < len(words):
        word = words[i]
        name = word[2:].replace("-", "_") if word.startswith("--") else ""
        if name not in spec:
            raise refused(f"{verb}: unexpected {word!r}")
        if spec[name].kind is bool:
            args[name] = True
            i += 1
            continue
        if i + 1 >= len(words) or not words[i + 1].lstrip("-").isdigit():
            raise refused(f"{verb}: {word} needs an integer")
        args[name] = int(words[i + 1])
        i += 2
    return args
