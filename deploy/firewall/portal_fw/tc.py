"""tc: the static check (tc has no dry run), the apply of a batch, a device's canonical text.

``tc -batch`` applies line by line and stops at the first error with the lines before it
applied; `static_check` catches what can be known without the kernel, and a batch that still
fails half way makes apply-bundle restore the whole rollback point. A full tree (mode replace,
and the saved batch a restore replays) is planned against what runs (`tctree`): the tree is
kept when its layout is the same, built anew otherwise.
"""

from __future__ import annotations

import re
import socket

from . import tctree
from .common import JSON, HelperError, failed, refused, run
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


DELETE_VERBS = frozenset({"del", "delete"})


def split_increment(text: str) -> tuple[str, str]:
    """An increment's lines in two phases: what makes or changes (before the rule set that
    names it) and what deletes (``class del``/``qdisc del``: after the rule set that stops
    naming it), each in its order. A delete that something later in the batch depends on (the
    same class made again, e.g. under another parent; a qdisc deleted and the device's tree
    started anew) stays in the first phase, in its place."""
    lines: list[tuple[str, str, str | None]] = []  # (device, line, what it deletes or None)
    for raw in text.splitlines(keepends=True):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        dev = words[words.index("dev") + 1] if "dev" in words[:-1] else ""
        deleted = None
        if len(words) > 1 and words[0] in {"class", "qdisc"} and words[1] in DELETE_VERBS:
            classid = words[words.index("classid") + 1] if "classid" in words[:-1] else None
            deleted = f"class {classid}" if words[0] == "class" and classid else "qdisc"
        lines.append((dev, raw if raw.endswith("\n") else raw + "\n", deleted))
    before: list[str] = []
    after: list[str] = []
    for index, (dev, line, deleted) in enumerate(lines):
        later = [ln for d, ln, gone in lines[index + 1 :] if d == dev and gone is None]
        needed = deleted == "qdisc" and bool(later)
        if deleted is not None and deleted.startswith("class "):
            classid = deleted.split()[1]
            needed = any(f" classid {classid} " in f" {ln.strip()} " for ln in later)
        (after if deleted is not None and not needed else before).append(line)
    return "".join(before), "".join(after)


class Staged:
    """A tc artefact in two phases around the rule set: `before` drops the shaping of devices
    the text no longer names (no HTB left there: nothing is classified to a missing class),
    makes and changes classes and builds a device anew; `after` removes classes. tc.current
    is written once both ran."""

    def __init__(self, host: Host, mode: str, text: str) -> None:
        self.host = host
        current = host.read_tc_current()
        self.previous = current
        self.summary: JSON = {}
        self.dropped: list[str] = []
        if mode == "replace":
            # shaping dropped (no HTB left: nothing is classified there) before the build, the
            # last device of a plan first (tctree: "The order the classes ...")
            self.dropped = sorted(devices(current) - devices(text), reverse=True)
            planned = tctree.plan(text)
            self.before, self.after, self.current = planned.before, planned.after, text
            self.summary = {"kept": planned.kept, "built": planned.built}
        else:
            self.before, self.after = split_increment(text)
            self.current = (current or "") + text
        self.ran_before = False

    def run_before(self) -> None:
        """Drop the devices no longer shaped, make and change classes (raises `failed`,
        artefact tc, when tc refuses a line)."""
        self.ran_before = True
        for dev in self.dropped:
            run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)
        _run_batch(self.before)

    def undo_before(self) -> list[str]:
        """The rule set was refused after `run_before`: put back the tree tc.current holds
        (planned against what runs: the classes made are deleted, the changed ones replaced).
        Answers errors (empty: done)."""
        if not self.ran_before or not (self.before.strip() or self.dropped):
            return []
        made = devices(self.before) - devices(self.previous)
        return replay(self.previous, sorted(made | devices(self.previous)))

    def run_after(self) -> JSON:
        """Remove the classes the rule set no longer names, keep tc.current; answers the
        summary."""
        _run_batch(self.after)
        if self.current.strip():
            self.host.write_file(self.host.tc_current, self.current)
        else:
            self.host.tc_current.unlink(missing_ok=True)
        return self.summary


def _run_batch(batch: str) -> None:
    if batch.strip():
        result = run(["tc", "-batch", "-"], stdin=batch)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()[-4000:]
            raise failed("tc rejected the batch half way", detail, artefact="tc")


def apply(host: Host, mode: str, text: str) -> JSON:
    """Run the batch and keep tc.current (both phases of `Staged` one after the other). A
    replace (the whole tree) is planned against what each device runs (`tctree`: the tree is
    kept when its layout is the same, built through pfifo otherwise) and drops the root qdisc
    of devices it no longer names; an increment runs as it is (deletes last). Answers which
    devices kept their tree and which were built. Raises `failed` (artefact tc) when tc
    refuses a line."""
    staged = Staged(host, mode, text)
    staged.run_before()
    return staged.run_after()


def replay(saved: str | None, device_names: list[str]) -> list[str]:
    """Put back shaping from a saved batch (the full tree and the increments after it): a
    device the batch names gets it planned like a full load (its tree kept when the layout is
    the same), every other device involved loses its root qdisc."""
    errors: list[str] = []
    named = devices(saved)
    for dev in device_names:  # no root qdisc already: tc answers an error, nothing to do
        if dev not in named:
            run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)
    if saved is not None:
        try:
            batch = tctree.plan(saved).text
        except HelperError as exc:
            return [*errors, f"tc: {exc.message}: {exc.detail}"]
        result = run(["tc", "-batch", "-"], stdin=batch)
        if result.returncode != 0:
            errors.append(f"tc: {(result.stderr or result.stdout).strip()}")
    return errors
