"""tc: the static check (tc has no dry run), the apply of a batch, a device's canonical text.

``tc -batch`` applies line by line and stops at the first error with the lines before it
applied; `static_check` catches what can be known without the kernel, and a batch that still
fails half way makes apply-bundle restore the whole rollback point.
"""

from __future__ import annotations

import re
import socket

from .common import HelperError, failed, refused, run
from .host import Host

TC_OBJECTS = frozenset({"qdisc", "class", "filter"})
TC_FORBIDDEN_WORDS = frozenset({"bpf", "object-file", "obj", "exec", "pinned", "xt", "ipt"})


def check_grammar(text: str) -> None:
    """Only qdisc/class/filter lines, none of the forbidden words (bpf, exec, ...)."""
    if "\x00" in text:
        raise refused("NUL byte in input")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] not in TC_OBJECTS:
            raise refused(f"line {number}: only qdisc, class and filter commands are allowed")
        bad = TC_FORBIDDEN_WORDS.intersection(w.lower() for w in words)
        if bad:
            raise refused(f"line {number}: '{sorted(bad)[0]}' is not allowed")


TC_VERBS = frozenset({"add", "replace", "change", "del", "delete"})
TC_HANDLE_WORDS = frozenset({"parent", "classid", "flowid", "handle"})
TC_SPECIAL_PARENTS = frozenset({"root", "ingress", "clsact", "none"})
TC_HANDLE = re.compile(r"(?:[0-9a-fA-F]{1,4})?:(?:[0-9a-fA-F]{1,4})?|[0-9a-fA-F]{1,4}")
TC_RATE = re.compile(r"(\d+(?:\.\d+)?)([a-zA-Z]*)")
TC_RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024**2, "gibit": 1024**3, "tibit": 1024**4,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
    "kibps": 8 * 1024, "mibps": 8 * 1024**2, "gibps": 8 * 1024**3, "tibps": 8 * 1024**4,
}  # fmt: skip
TC_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2,
                 "g": 1024**3, "gb": 1024**3, "kbit": 128, "mbit": 128 * 1024,
                 "gbit": 128 * 1024**2}  # fmt: skip
TC_SIZE_WORDS = frozenset({"burst", "cburst", "limit", "quantum", "mtu", "mpu"})
MAX_RATE_BITS = 4e12  # 4 Tbit/s: anything above is a typo, not a link
IFNAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


def _tc_fail(number: int, message: str) -> HelperError:
    return failed(f"tc line {number}: {message}")


TC_DEV_RE = re.compile(r"(?<!\S)dev[ \t]+(\S+)")


def devices(text: str | None) -> set[str]:
    """The devices a tc batch names (``dev X``; one regular-expression pass: a 24,000-class
    batch is read on every push)."""
    return set(TC_DEV_RE.findall(text or ""))


def static_check(text: str) -> set[str]:
    """The grammar check plus what can be known without the kernel.

    tc has no dry run (``tc -batch`` applies line by line and stops at the first error). This
    checks: only qdisc/class/filter with add/replace/change/del; no forbidden words; every line
    names a device and ``dev X`` exists in this network namespace; handles, parents, classids
    and flowids parse as tc handles; rate/ceil/peakrate parse and lie in 8 bit/s..4 Tbit/s with
    ceil >= rate; burst/cburst/limit/quantum/mtu/mpu parse as positive sizes. It cannot know
    whether a parent or class exists at that point of the batch, whether the kernel accepts the
    combination of options (e.g. a quantum HTB refuses, a qdisc kind that is not built), or
    whether a delete names something that exists: such a batch fails half way at apply, and
    apply-bundle then restores the whole rollback point. Returns the devices named.
    """
    check_grammar(text)
    devices: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) < 2 or words[1] not in TC_VERBS:
            raise _tc_fail(number, f"the verb must be one of {', '.join(sorted(TC_VERBS))}")
        values: dict[str, str] = {}
        i = 2
        while i < len(words):
            word = words[i]
            needs_value = (
                word in {"dev", "rate", "ceil", "peakrate"} | TC_HANDLE_WORDS | TC_SIZE_WORDS
            )
            if needs_value:
                if i + 1 >= len(words):
                    raise _tc_fail(number, f"'{word}' needs a value")
                value = words[i + 1]
                values.setdefault(word, value)
                _tc_check_value(number, words[0], word, value)
                if word == "dev":
                    devices.add(value)
                i += 2
                continue
            i += 1
        if "dev" not in values:
            raise _tc_fail(number, "names no device (dev X)")
        if words[0] == "class" and words[1] not in {"del", "delete"} and "classid" not in values:
            raise _tc_fail(number, "a class needs a classid")
        rates = [_tc_rate(number, values[k]) for k in ("rate", "ceil") if k in values]
        if len(rates) == 2 and rates[1] < rates[0]:
            raise _tc_fail(number, "ceil is below rate")
    return devices


def _tc_rate(number: int, value: str) -> float:
    match = TC_RATE.fullmatch(value)
    if not match or match.group(2).lower() not in TC_RATE_UNITS:
        raise _tc_fail(number, f"bad rate {value!r}")
    bits = float(match.group(1)) * TC_RATE_UNITS[match.group(2).lower()]
    if not 8 <= bits <= MAX_RATE_BITS:
        raise _tc_fail(number, f"rate {value!r} outside 8bit..4Tbit")
    return bits


def _tc_check_value(number: int, obj: str, word: str, value: str) -> None:
    if word == "dev":
        if not IFNAME.fullmatch(value):
            raise _tc_fail(number, f"bad device name {value!r}")
        try:
            socket.if_nametoindex(value)
        except OSError:
            raise _tc_fail(number, f"device {value!r} does not exist on this host") from None
    elif word in TC_HANDLE_WORDS:
        if word == "handle" and obj == "filter":
            return  # filter handles are classifier-specific (u32 800::800, fw marks)
        if word == "parent" and value in TC_SPECIAL_PARENTS:
            return
        if not TC_HANDLE.fullmatch(value):
            raise _tc_fail(number, f"bad {word} {value!r} (a tc handle such as 1: or 1:a)")
    elif word in {"rate", "ceil", "peakrate"}:
        _tc_rate(number, value)
    else:
        match = re.fullmatch(r"(\d+)([a-zA-Z]*)(?:/\d+)?", value)
        if not match or match.group(2).lower() not in TC_SIZE_UNITS or int(match.group(1)) <= 0:
            raise _tc_fail(number, f"bad {word} {value!r}")


TC_VOLATILE = re.compile(r"\s*\bdirect_packets_stat \d+")


def canon(dev: str) -> str:
    """What runs on one device, as text without statistics: ``tc -d qdisc show`` and ``tc -d
    class show``, lines sorted (the class listing order is the kernel's hash order)."""
    qdisc = run(["tc", "-d", "qdisc", "show", "dev", dev], timeout=60)
    if qdisc.returncode != 0:
        return f"error: {(qdisc.stderr or qdisc.stdout).strip()}\n"
    classes = run(["tc", "-d", "class", "show", "dev", dev], timeout=60)
    lines = [
        TC_VOLATILE.sub("", line).rstrip()
        for line in (qdisc.stdout + classes.stdout).splitlines()
        if line.strip()
    ]
    return "\n".join(sorted(lines)) + "\n"


def apply(host: Host, mode: str, text: str) -> None:
    """Run the batch and keep tc.current (a replace also drops the root qdisc of devices it no
    longer names). Raises `failed` (artefact tc) when tc refuses a line."""
    current = host.read_tc_current()
    if mode == "replace":
        for dev in sorted(devices(current) - devices(text)):
            run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)  # shaping dropped
        new_current = text
    else:
        new_current = (current or "") + text
    if text.strip():
        result = run(["tc", "-batch", "-"], stdin=text)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()[-4000:]
            raise failed("tc rejected the batch half way", detail, artefact="tc")
    if new_current.strip():
        host.write_file(host.tc_current, new_current)
    else:
        host.tc_current.unlink(missing_ok=True)


def replay(saved: str | None, device_names: list[str]) -> list[str]:
    """Put back shaping from a saved batch: delete the root qdisc of every device involved,
    replay the batch (the compiler's starts with a pfifo root, so replays are clean)."""
    errors = []
    for dev in device_names:  # no root qdisc already: tc answers an error, nothing to do
        run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)
    if saved is not None:
        result = run(["tc", "-batch", "-"], stdin=saved)
        if result.returncode != 0:
            errors.append(f"tc: {(result.stderr or result.stdout).strip()}")
    return errors
