#!/usr/bin/python3 -IS
"""portal-fw: the only thing the portal's SSH key may run on a firewall host.

Installed as the forced command of the portal's key in authorized_keys (through the launcher
`portal-fw` beside this file, which runs this module from its cached bytecode), e.g.

    command="/usr/local/sbin/portal-fw --state-dir /var/lib/portal-fw --host-name nat1",restrict ssh-ed25519 AAAA...

sshd puts what the client asked for into SSH_ORIGINAL_COMMAND; this helper accepts only a closed
set of verbs with validated arguments and refuses everything else (never a shell):

    check [--incremental]                     rule-set text on stdin -> nft -c (nothing changes)
    apply --confirm-within SECONDS [--incremental] [--version LABEL] [--staged SHA256]
          [--health-sample-ms MS]             (text on stdin: nft -c it first) save the rollback
                                              point, arm the rollback timer, apply atomically,
                                              print the loaded version (and a health sample)
    confirm                                   keep what was applied (disarm the timer)
    rollback                                  restore the rollback point now
    version                                   the loaded version (marker in the kernel + state)
    health [--sample-ms MS] [--no-digest]     conntrack, softirq per CPU, load, interfaces, version,
                                              the content digest (full read; not with --no-digest)
    tc-apply                                  tc -batch on stdin (qdisc/class/filter lines only)
    apply-bundle --confirm-within SECONDS [--health-sample-ms MS]
                                              bundle JSON on stdin ({"format": 1, "version",
                                              "artefacts": {"nft"|"tc"|NAME: {"mode", "text"}}}):
                                              check all, arm ONE rollback point (nft + tc +
                                              declared files + state) and the timer, apply tc ->
                                              nft -> files, restore all if a step fails; answers
                                              the content digest
    digest                                    content digest of what runs (nft parts, tc per
                                              shaping device, declared files) and which parts
                                              differ from the last apply-bundle
    dhcp-leases                               the leases Kea holds (declared kea-dhcp4 artefact)
    traffic                                   traffic per accounting key (the rule set's acct*
                                              sets): totals since the epoch, surviving the
                                              portal's own full replacements and rollbacks
    ha-resync                                 ask the peer's conntrackd for a full resync
    help                                      this list

confirm, rollback and the timer restore whatever the rollback point holds: the old `apply`'s
(nft only) or apply-bundle's (nft, tc, files, state; tc verified against the recorded text).
File artefacts are declared by the host, not the portal: ``--artefacts FILE`` (see README.md).

Every answer is one JSON object on stdout ({"ok": true|false, "verb": ...}); a human-readable
message goes to stderr on failure.  Exit codes: 0 ok, 1 the operation failed (nft/tc refused the
input, nothing or only the reported part changed), 2 refused (unknown verb, bad argument, input
outside the portal's tables), 3 state conflict (nothing to confirm / no rollback point),
4 busy (another operation holds the lock).

The rule-set text may touch only tables whose name starts with the table prefix (``portal_`` by
default): no ``flush ruleset``, no ``include``, no other tables.  A full apply replaces all loaded
portal tables in one nft transaction; ``--incremental`` applies the text on top of them.

Python 3 standard library only.  Runs as root on the firewall host (or inside a lab namespace).
"""

from __future__ import annotations

import argparse
import array
import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(os.path.realpath(__file__)).parent  # portal-ha and kea-ctl live beside this file
# How this helper runs itself again (the rollback timer): this module from its cached bytecode,
# without site-packages, as the launcher `portal-fw` does (the directory is the first argument);
# a host that installed this file itself as /usr/local/sbin/portal-fw runs the file.
SELF_COMMAND: tuple[str, ...] = (
    (
        sys.executable,
        "-I",
        "-S",
        "-c",
        "import sys; sys.path.insert(0, sys.argv.pop(1)); import portal_fw; "
        "sys.exit(portal_fw.main())",
        str(HERE),
    )
    if Path(__file__).name == "portal_fw.py"
    else (sys.executable, "-I", "-S", str(Path(os.path.realpath(__file__))))
)
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAMILIES = frozenset({"ip", "ip6", "inet", "arp", "bridge", "netdev"})
NFT_OBJECTS = frozenset(
    {
        "table",
        "chain",
        "set",
        "map",
        "element",
        "rule",
        "flowtable",
        "counter",
        "quota",
        "limit",
        "secmark",
        "synproxy",
        "ct",
    }
)
NFT_CT_OBJECTS = frozenset({"helper", "timeout", "expectation"})
NFT_WRITE_COMMANDS = frozenset({"add", "create", "delete", "destroy", "flush", "insert", "replace"})
TC_OBJECTS = frozenset({"qdisc", "class", "filter"})
TC_FORBIDDEN_WORDS = frozenset({"bpf", "object-file", "obj", "exec", "pinned", "xt", "ipt"})

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_CONFLICT, EXIT_BUSY = 0, 1, 2, 3, 4

MAX_COMMAND_CHARS = 1024
DEFAULT_MAX_INPUT = 256 * 1024 * 1024
NFT_TIMEOUT = 300
LOCK_TIMEOUT = 60.0
MAX_CONFIRM_WITHIN = 3600
LOG_MAX_BYTES = 1024 * 1024


class HelperError(Exception):
    """Ends the verb with a JSON error answer and an exit code."""

    def __init__(self, code: int, kind: str, message: str, detail: str | None = None):
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message
        self.detail = detail
        self.phase: str | None = None  # apply: "check" when it stopped before changing anything
        self.extra: dict = {}  # more keys for the JSON answer (apply-bundle: artefact, rolled_back)


def refused(message: str) -> HelperError:
    return HelperError(EXIT_REFUSED, "refused", message)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


# --------------------------------------------------------------------------------------------
# Scope check: the rule-set text may only touch the portal's own tables.
# --------------------------------------------------------------------------------------------


def _nft_statements(text: str) -> list[tuple[int, list[str]]]:
    """Split nft text into top-level statements: (line number, tokens outside any braces).

    Tokens inside ``{ ... }`` blocks are dropped (a table block cannot name another table);
    comments and quoted strings are honoured.
    """
    statements: list[tuple[int, list[str]]] = []
    tokens: list[str] = []
    start_line = 1
    line = 1
    depth = 0
    i = 0
    n = len(text)
    current = ""

    def flush_token() -> None:
        nonlocal current
        if current:
            if depth == 0:
                tokens.append(current)
            elif current == "include":  # nft also accepts include inside blocks
                raise refused(f"line {line}: 'include' is not allowed")
            current = ""

    def end_statement() -> None:
        nonlocal tokens, start_line
        flush_token()
        if depth == 0 and tokens:
            statements.append((start_line, tokens))
            tokens = []
        if depth == 0:
            start_line = line

    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            flush_token()
            i += 2
            line += 1
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\n":
                    raise refused(f"line {line}: unterminated string")
                j += 1
            if j >= n:
                raise refused(f"line {line}: unterminated string")
            current += text[i : j + 1]
            i = j + 1
            continue
        if ch == "{":
            flush_token()
            if depth == 0 and not tokens:
                raise refused(f"line {line}: block without a statement")
            depth += 1
            i += 1
            continue
        if ch == "}":
            flush_token()
            depth -= 1
            if depth < 0:
                raise refused(f"line {line}: unbalanced '}}'")
            i += 1
            if depth == 0:
                end_statement()
            continue
        if ch in "\n;":
            if depth == 0:
                end_statement()
            if ch == "\n":
                line += 1
                if depth == 0 and not tokens:
                    start_line = line
            i += 1
            continue
        if ch in " \t\r":
            flush_token()
            i += 1
            continue
        current += ch
        i += 1
    end_statement()
    if depth != 0:
        raise refused("unbalanced '{' at end of input")
    return statements


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return token[1:-1]
    return token


def check_scope(text: str, prefix: str) -> None:
    """Raise a refusal unless every top-level statement only touches tables named prefix*."""
    if "\x00" in text:
        raise refused("NUL byte in input")
    for line, tokens in _nft_statements(text):
        head = tokens[0]
        if head in {"define", "redefine", "undefine"}:
            continue
        if head == "include":
            raise refused(f"line {line}: 'include' is not allowed")
        if head == "table":
            rest = tokens[1:]
        elif head in NFT_WRITE_COMMANDS:
            if len(tokens) < 2 or tokens[1] not in NFT_OBJECTS:
                what = " ".join(tokens[:2])
                raise refused(f"line {line}: '{what}' is not allowed (only portal tables)")
            rest = tokens[2:]
            if tokens[1] == "ct":
                if not rest or rest[0] not in NFT_CT_OBJECTS:
                    raise refused(f"line {line}: unknown ct object")
                rest = rest[1:]
        else:
            raise refused(f"line {line}: '{head}' is not allowed at top level")
        if rest and rest[0] in FAMILIES:
            rest = rest[1:]
        if not rest:
            raise refused(f"line {line}: statement names no table")
        name = _unquote(rest[0])
        if name == "handle" or not name.startswith(prefix):
            raise refused(
                f"line {line}: table '{name}' is not a portal table (names must start with "
                f"'{prefix}')"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise refused(f"line {line}: bad table name {name!r}")


def check_tc_batch(text: str) -> None:
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


# --------------------------------------------------------------------------------------------
# Running nft and tc
# --------------------------------------------------------------------------------------------


def run(argv: list[str], *, stdin: str | None = None, timeout: float = NFT_TIMEOUT):
    try:
        return subprocess.run(  # noqa: S603 - fixed argv, never a shell
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": SAFE_PATH, "LC_ALL": "C"},
            check=False,
        )
    except FileNotFoundError as exc:
        raise HelperError(EXIT_FAILED, "failed", f"{argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise HelperError(EXIT_FAILED, "failed", f"{argv[0]} timed out after {timeout}s") from exc


class Host:
    """One firewall host: its nft, its state directory, its options."""

    def __init__(
        self,
        state_dir: Path,
        name: str,
        prefix: str,
        meta_table: str,
        version_set: str,
        artefacts_file: Path | None = None,
    ):
        self.state_dir = state_dir
        self.artefacts_file = artefacts_file
        self.artefacts: dict[str, FileArtefact] = {}
        self.digest_source = "auto"  # netlink, falling back to nft -j
        self.ha_run_dir = Path("/run/portal-ha")
        self.version_set = tuple(version_set.split())
        self.name = name
        self.prefix = prefix
        self.meta_family, self.meta_name = meta_table.split()
        self.lock_file = state_dir / "lock"
        self.state_file = state_dir / "state.json"
        self.pending_file = state_dir / "pending.json"
        self.rollback_nft = state_dir / "rollback.nft"
        self.rollback_json = state_dir / "rollback.json"
        self.rollback_dir = state_dir / "rollback.d"  # apply-bundle's point (symlink to rp-*)
        self.tc_current = state_dir / "tc.current"  # the tc batch that built today's shaping
        self.nft_current = state_dir / "nft.current"  # the nft text that built the portal tables
        self.nft_current_meta = state_dir / "nft.current.json"  # {"bytes": N}: complete?
        self.upload_nft = state_dir / "upload.nft"
        self.staged_nft = state_dir / "staged.nft"
        self.tx_nft = state_dir / "transaction.nft"
        self.log_file = state_dir / "log.jsonl"
        self.acct_file = state_dir / "acct.json"  # traffic counted by replaced tables

    # ---- files --------------------------------------------------------------------------
    def read_json(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None

    def write_file(self, path: Path, data: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def write_json(self, path: Path, obj: dict, *, compact: bool = False) -> None:
        if compact:  # large state: the C encoder (indent makes json use the Python one)
            self.write_file(path, json.dumps(obj, separators=(",", ":")) + "\n")
        else:
            self.write_file(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")

    def log(self, event: dict) -> None:
        event = {"at": now_iso(), "host": self.name, **event}
        try:
            if self.log_file.exists() and self.log_file.stat().st_size > LOG_MAX_BYTES:
                os.replace(self.log_file, self.log_file.with_name("log.jsonl.1"))
            with open(self.log_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(event, sort_keys=True) + "\n")
        except OSError:
            pass

    @contextlib.contextmanager
    def locked(self, timeout: float = LOCK_TIMEOUT):
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise HelperError(
                            EXIT_BUSY, "busy", "another operation is running on this host"
                        ) from exc
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def nft_current_valid(self) -> bool:
        """nft.current is complete (its size is the one recorded after its last write)."""
        meta = self.read_json(self.nft_current_meta) or {}
        try:
            return meta.get("bytes") == self.nft_current.stat().st_size
        except FileNotFoundError:
            return False

    def set_nft_current(self, source: Path | None, append: str | None = None) -> None:
        """nft.current := a copy of `source` (+ `append`), or forget it (source None)."""
        self.nft_current_meta.unlink(missing_ok=True)
        if source is None:
            self.nft_current.unlink(missing_ok=True)
            return
        tmp = self.nft_current.with_name("nft.current.tmp")
        shutil.copyfile(source, tmp)
        if append is not None:
            with open(tmp, "a", encoding="utf-8") as fh:
                fh.write(append if append.endswith("\n") else append + "\n")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.nft_current)
        self.write_json(self.nft_current_meta, {"bytes": self.nft_current.stat().st_size})

    def read_tc_current(self) -> str | None:
        try:
            return self.tc_current.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    # ---- nft ------------------------------------------------------------------------------
    def portal_tables(self) -> list[tuple[str, str]]:
        result = run(["nft", "-j", "list", "tables"])
        if result.returncode != 0:
            raise HelperError(EXIT_FAILED, "failed", "nft list tables failed", result.stderr)
        tables = []
        for item in json.loads(result.stdout or "{}").get("nftables", []):
            table = item.get("table")
            if table and table["name"].startswith(self.prefix):
                tables.append((table["family"], table["name"]))
        return tables

    def dump_portal_tables(self) -> str:
        parts = []
        for family, name in self.portal_tables():
            result = run(["nft", "-s", "list", "table", family, name])
            if result.returncode != 0:
                raise HelperError(
                    EXIT_FAILED, "failed", f"nft list table {family} {name} failed", result.stderr
                )
            parts.append(result.stdout)
        return "".join(parts)

    def transaction(self, body_file: Path, *, replace: bool) -> str:
        lines = []
        if replace:
            lines += [f"delete table {family} {name}" for family, name in self.portal_tables()]
        lines.append(f'include "{body_file}"')
        return "\n".join(lines) + "\n"

    def nft_file(self, tx: str, *, check_only: bool) -> subprocess.CompletedProcess:
        self.write_file(self.tx_nft, tx)
        if check_only:
            return run(["nft", "-c", "-f", str(self.tx_nft)])
        replacing = tx.startswith("delete table ")
        counted = read_acct_kernel(self) if replacing else None
        result = run(["nft", "-f", str(self.tx_nft)])
        if counted and result.returncode == 0:
            # The replaced tables' element counters are gone (the new text and the stateless
            # rollback dumps start at zero): keep what they had counted.
            fold_acct(self, counted)
        return result

    def restore(self, saved_file: Path) -> None:
        """Replace all portal tables by the saved ones, in one transaction."""
        result = self.nft_file(self.transaction(saved_file, replace=True), check_only=False)
        if result.returncode != 0:
            raise HelperError(
                EXIT_FAILED, "failed", "restoring the rollback point failed", result.stderr.strip()
            )

    def loaded_version(self) -> dict:
        for reader in MARKER_READERS:
            found = reader(self)
            if found:
                return found
        return {"version": None, "source": None}

    # ---- rollback timer --------------------------------------------------------------------
    def kill_timer(self, pending: dict | None) -> None:
        if not pending or not pending.get("timer_pid"):
            return
        pid = int(pending["timer_pid"])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return
        if pending["token"].encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def arm_timer(self, token: str) -> int:
        argv = [
            *SELF_COMMAND,
            "--state-dir",
            str(self.state_dir),
            "--host-name",
            self.name,
            "--table-prefix",
            self.prefix,
            "--meta-table",
            f"{self.meta_family} {self.meta_name}",
            "--version-set",
            " ".join(self.version_set),
            "--internal-rollback-timer",
            token,
        ]
        if self.artefacts_file is not None:
            argv[-2:-2] = ["--artefacts", str(self.artefacts_file)]
        proc = subprocess.Popen(  # noqa: S603 - ourselves, fixed argv
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            env={"PATH": SAFE_PATH, "LC_ALL": "C"},
        )
        return proc.pid

    def rollback_now(self, reason: str) -> dict:
        """Restore the rollback point (caller holds the lock). Returns the restored state."""
        if self.rollback_dir.exists():  # apply-bundle's: nft + tc + files + state
            return restore_rollback_point(self, reason)
        if not self.rollback_nft.exists():
            raise HelperError(EXIT_CONFLICT, "conflict", "no rollback point on this host")
        self.restore(self.rollback_nft)
        previous = self.read_json(self.rollback_json) or {}
        previous = {
            **previous,
            "last_event": {"event": "rolled-back", "reason": reason, "at": now_iso()},
        }
        self.write_json(self.state_file, previous)
        self.rollback_nft.unlink(missing_ok=True)
        self.rollback_json.unlink(missing_ok=True)
        self.log({"event": "rolled-back", "reason": reason, "to": previous.get("version")})
        return previous


# --------------------------------------------------------------------------------------------
# Version markers (pluggable: the first reader that finds something wins)
# --------------------------------------------------------------------------------------------

VERSION_IN_COMMENT = re.compile(r'comment\s+"[^"]*?\bversion[=:]\s*([A-Za-z0-9._:+/-]+)')
VERSION_SET = re.compile(r"set\s+version\s*\{[^}]*?elements\s*=\s*\{\s*([^,}\s]+)", re.S)


def marker_from_meta_table(host: Host) -> dict | None:
    """``table inet portal_meta { comment "portal-version=..." }`` or a chain/set comment, or a
    set named ``version`` whose single element is the version number."""
    result = run(["nft", "list", "table", host.meta_family, host.meta_name], timeout=30)
    if result.returncode != 0:
        return None
    source = f"nft:{host.meta_family} {host.meta_name}"
    match = VERSION_IN_COMMENT.search(result.stdout)
    if match:
        return {"version": match.group(1), "source": source + " comment"}
    match = VERSION_SET.search(result.stdout)
    if match:
        return {"version": _unquote(match.group(1)), "source": source + " set version"}
    return None


VERSION_ELEMENT_HASH = re.compile(r'comment\s+"sha256:([0-9a-f]{64})"')


def marker_from_version_set(host: Host) -> dict | None:
    """The compiler's marker: the comment ``sha256:<hash>`` on the single element of the set
    ``version`` in the portal's table. Lists that one set only: listing a table with hundreds
    of thousands of elements would take seconds."""
    family, table, name = host.version_set
    result = run(["nft", "list", "set", family, table, name], timeout=30)
    if result.returncode != 0:
        return None
    match = VERSION_ELEMENT_HASH.search(result.stdout)
    if match:
        return {"version": match.group(1), "source": f"nft:{family} {table} set {name}"}
    return None


MARKER_READERS: list[Callable[[Host], dict | None]] = [
    marker_from_version_set,
    marker_from_meta_table,
]


# --------------------------------------------------------------------------------------------
# Declared file artefacts (--artefacts FILE): generic, so Kea or keepalived need host config only
# --------------------------------------------------------------------------------------------

ARTEFACT_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
RESERVED_ARTEFACTS = frozenset({"nft", "tc"})
FILE_ARTEFACT_KEYS = frozenset({"path", "check", "reload", "mode"})
PLACEHOLDER = "{file}"


class FileArtefact:
    """A config file the helper writes for the portal: where, how to check it, how to reload.
    (A plain class: `dataclasses` would add ~8 ms of imports to every call of the helper.)"""

    __slots__ = ("check", "mode", "name", "path", "reload")

    def __init__(
        self, name: str, path: Path, check: tuple[str, ...], reload: tuple[str, ...], mode: int
    ) -> None:
        self.name, self.path, self.check, self.reload, self.mode = name, path, check, reload, mode

    def argv(self, which: tuple[str, ...], file: Path) -> list[str]:
        return [word.replace(PLACEHOLDER, str(file)) for word in which]


def _config_error(message: str) -> HelperError:
    return refused(f"--artefacts: {message}; fix the host's artefact configuration")


def _argv_list(name: str, key: str, value, *, need_file: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(w, str) for w in value):
        raise _config_error(f"{name}.{key} must be a non-empty list of strings (an argv)")
    if any(not w or "\x00" in w for w in value):
        raise _config_error(f"{name}.{key}: empty word or NUL byte")
    if "/" in value[0] and not value[0].startswith("/"):
        raise _config_error(f"{name}.{key}: the program is a bare name or an absolute path")
    for word in value:
        if "{" in word.replace(PLACEHOLDER, "") or "}" in word.replace(PLACEHOLDER, ""):
            raise _config_error(f"{name}.{key}: {PLACEHOLDER} is the only placeholder")
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
            _argv_list(name, "reload", spec["reload"], need_file=False)
            if spec.get("reload") is not None
            else ()
        )
        mode_text = spec.get("mode", "0644")
        if not isinstance(mode_text, str) or not re.fullmatch(r"0?[0-7]{3}", mode_text):
            raise _config_error(f'{name}.mode must be an octal string such as "0640"')
        artefacts[name] = FileArtefact(name, norm, check, reload_, int(mode_text, 8))
    return artefacts


# --------------------------------------------------------------------------------------------
# The bundle (apply-bundle's stdin)
# --------------------------------------------------------------------------------------------

BUNDLE_KEYS = frozenset({"format", "version", "artefacts"})
BUNDLE_ARTEFACT_KEYS = frozenset({"mode", "text"})
BUNDLE_MODES = ("replace", "increment")


def parse_bundle(text: str, declared: dict[str, FileArtefact]) -> dict:
    """Validate the bundle strictly; any problem is a refusal (exit 2), nothing changed."""
    try:
        bundle = json.loads(text)
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


# --------------------------------------------------------------------------------------------
# tc: the static check (tc has no dry run) and the canonical state of a device
# --------------------------------------------------------------------------------------------

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
    return HelperError(EXIT_FAILED, "failed", f"tc line {number}: {message}")


TC_DEV_RE = re.compile(r"(?<!\S)dev[ \t]+(\S+)")


def tc_devices(text: str | None) -> set[str]:
    """The devices a tc batch names (``dev X``; one regular-expression pass: a 24,000-class
    batch is read on every push)."""
    return set(TC_DEV_RE.findall(text or ""))


def tc_static_check(text: str) -> set[str]:
    """The grammar check of `tc-apply` plus what can be known without the kernel.

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
    check_tc_batch(text)
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


def tc_canon(dev: str) -> str:
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


# --------------------------------------------------------------------------------------------
# nf_tables over netlink (stdlib only): dump the portal tables straight from the kernel
# --------------------------------------------------------------------------------------------
#
# nft 1.0.6 loads and prints its whole cache for any list command (40 s, 1.5 GB for 800k
# elements); the kernel dumps the same objects as netlink messages in a fraction of that.
# Constants: linux/netlink.h, linux/netfilter/nfnetlink.h, linux/netfilter/nf_tables.h.

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP_INTR, NLM_F_DUMP = 0x1, 0x2, 0x10, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_TYPE_MASK = 0x3FFF
NFT_MSG_GETTABLE, NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET = 1, 4, 7, 10
NFT_MSG_GETSETELEM, NFT_MSG_GETGEN, NFT_MSG_GETOBJ, NFT_MSG_GETFLOWTABLE = 13, 16, 19, 23
NFPROTO = {"inet": 1, "ip": 2, "arp": 3, "netdev": 5, "bridge": 7, "ip6": 10}
NFPROTO_NAMES = {number: name for name, number in NFPROTO.items()}
# attribute numbers (enum nft_*_attributes)
NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME = 1, 1, 3
NFTA_RULE_TABLE, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS = 1, 2, 4
NFTA_SET_TABLE, NFTA_SET_NAME, NFTA_SET_FLAGS, NFTA_SET_EXPR, NFTA_SET_EXPRESSIONS = 1, 2, 3, 17, 18
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NFTA_OBJ_DATA, NFTA_FLOWTABLE_TABLE = 1, 3, 4, 1
NFTA_GEN_ID, NFTA_LIST_ELEM, NFTA_EXPR_NAME, NFTA_EXPR_DATA = 1, 1, 1, 2
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_EXPR, NFTA_SET_ELEM_EXPRESSIONS, NFTA_DATA_VALUE = 1, 7, 11, 1
NFTA_COUNTER_BYTES, NFTA_COUNTER_PACKETS = 1, 2
NFT_SET_ANONYMOUS, NFT_SET_MAP, NFT_SET_TIMEOUT, NFT_SET_EVAL, NFT_SET_OBJECT, NFT_SET_EXPR = (
    0x1, 0x8, 0x10, 0x20, 0x40, 0x100)  # fmt: skip
NFT_OBJECT_COUNTER, NFT_OBJECT_QUOTA = 1, 2
# What is not content: handles, use counts, transaction ids, padding, the owner's port id,
# base-chain counters; an element's expiry timer and its stateful expressions.
TABLE_VOLATILE = frozenset({3, 4, 5, 7})  # USE HANDLE PAD OWNER
CHAIN_VOLATILE = frozenset({1, 2, 6, 8, 9, 11})  # TABLE HANDLE USE COUNTERS PAD ID
RULE_KEPT = frozenset({4, 5, 7})  # EXPRESSIONS COMPAT USERDATA
# TABLE ID PAD HANDLE, and from kernel 6.x (newer than the Debian 12 headers) 19 NFTA_SET_TYPE
# (the backend the kernel chose) and 20 NFTA_SET_COUNT (the element count: ours is in the part)
SET_VOLATILE = frozenset({1, 10, 14, 16, 19, 20})
ELEM_VOLATILE = frozenset({5, 7, 8, 11})  # EXPIRATION EXPR PAD EXPRESSIONS
OBJ_VOLATILE = frozenset({1, 5, 6, 7})  # TABLE USE HANDLE PAD
FLOWTABLE_VOLATILE = frozenset({1, 4, 5, 6})  # TABLE USE HANDLE PAD

MOD256 = 1 << 256
NLMSGHDR = struct.Struct("=IHHII")
NLA_HDR = struct.Struct("=HH")
NETLINK_RECV_BUFFER = 1 << 20


class NetlinkError(Exception):
    """The kernel refused a request (errno) or answered something unexpected."""

    def __init__(self, message: str, errno_: int | None = None):
        super().__init__(message)
        self.errno = errno_


class DumpInterrupted(Exception):
    """The rule set changed during a dump (NLM_F_DUMP_INTR or another generation)."""


def _align4(n: int) -> int:
    return (n + 3) & ~3


def nla(attr_type: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return NLA_HDR.pack(length, attr_type) + payload + b"\0" * (_align4(length) - length)


def nla_str(attr_type: int, text: str) -> bytes:
    return nla(attr_type, text.encode() + b"\0")


def nla_list(data: bytes) -> list[tuple[int, bytes]]:
    """The attributes in `data`: (type without the NESTED/BYTEORDER flags, payload)."""
    out = []
    offset, end = 0, len(data)
    while offset + 4 <= end:
        length, attr_type = NLA_HDR.unpack_from(data, offset)
        if length < 4:
            break
        out.append((attr_type & NLA_TYPE_MASK, data[offset + 4 : offset + length]))
        offset += _align4(length)
    return out


def nla_first(data: bytes, wanted: int) -> bytes | None:
    for attr_type, payload in nla_list(data):
        if attr_type == wanted:
            return payload
    return None


def nla_text(payload: bytes | None) -> str | None:
    return None if payload is None else payload.split(b"\0", 1)[0].decode(errors="replace")


def nla_be32(payload: bytes | None) -> int:
    return int.from_bytes(payload[:4], "big") if payload else 0


def nla_encode(attrs: Iterable[tuple[int, bytes]]) -> bytes:
    return b"".join(nla(attr_type, payload) for attr_type, payload in attrs)


class NftNetlink:
    """A NETLINK_NETFILTER socket that dumps nf_tables objects (no batches: GETs only)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))
        self.seq = int(time.time()) & 0xFFFF
        self.buffer = bytearray(NETLINK_RECV_BUFFER)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(
        self, msg: int, family: int = 0, attrs: bytes = b"", *, dump: bool = True
    ) -> Iterable[tuple[int, bytes]]:
        """Send one GET; yield (nfgenmsg family, attribute payload) of each answer.
        A dump runs to NLMSG_DONE; NLM_F_DUMP_INTR raises DumpInterrupted at the end."""
        self.seq += 1
        seq = self.seq
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
        body = struct.pack("=BBH", family, 0, 0) + attrs
        header = NLMSGHDR.pack(16 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | msg, flags, seq, 0)
        self.sock.send(header + body)
        interrupted = False
        buffer = self.buffer
        view = memoryview(buffer)
        while True:
            size = self.sock.recv_into(buffer, 0, socket.MSG_TRUNC)
            if size > len(buffer):
                raise NetlinkError(f"netlink message of {size} bytes truncated")
            offset = 0
            while offset + 16 <= size:
                length, msg_type, msg_flags, msg_seq, _pid = NLMSGHDR.unpack_from(buffer, offset)
                if length < 16 or offset + length > size:
                    raise NetlinkError("malformed netlink message")
                start, offset = offset, offset + _align4(length)
                if msg_seq != seq:
                    continue  # an answer to an earlier request that was not read to its end
                if msg_type == NLMSG_DONE:
                    if interrupted:
                        raise DumpInterrupted("the rule set changed during the dump")
                    return
                if msg_type == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", buffer, start + 16)
                    if error:
                        raise NetlinkError(os.strerror(-error), -error)
                    return  # an ACK
                if msg_flags & NLM_F_DUMP_INTR:
                    interrupted = True
                yield buffer[start + 16], bytes(view[start + 20 : start + length])
                if not dump and not msg_flags & NLM_F_MULTI:
                    return

    def generation(self) -> int:
        for _family, payload in self.request(NFT_MSG_GETGEN, dump=False):
            return nla_be32(nla_first(payload, NFTA_GEN_ID))
        raise NetlinkError("no answer to GETGEN")

    def dump(self, msg: int, family: int, attrs: bytes = b"") -> list[list[tuple[int, bytes]]]:
        return [nla_list(payload) for _family, payload in self.request(msg, family, attrs)]


def _strip_expr(payload: bytes, anonymous: dict[str, bytes]) -> bytes:
    """One expression (NFTA_EXPR_NAME + NFTA_EXPR_DATA) without its state: counter values, a
    quota's consumption and depletion flag, `last`'s timestamp; anonymous set names replaced
    by their content (their names, __set%d, depend on the history)."""
    attrs = dict(nla_list(payload))
    name = nla_text(attrs.get(NFTA_EXPR_NAME)) or ""
    data = attrs.get(NFTA_EXPR_DATA)
    out = [(NFTA_EXPR_NAME, name.encode())]
    if data is None or name in {"counter", "last"}:
        return nla_encode(out)
    kept = []
    for attr_type, value in nla_list(data):
        if name == "quota":
            if attr_type in {3, 4}:  # PAD CONSUMED
                continue
            if attr_type == 2:  # FLAGS: only INV is configuration (DEPLETED is state)
                value = (nla_be32(value) & 1).to_bytes(4, "big")
        elif name == "lookup" and attr_type in {1, 4}:  # SET SET_ID
            if attr_type == 4:
                continue
            value = anonymous.get(nla_text(value) or "", value)
        elif name == "dynset":
            if attr_type in {2, 8}:  # SET_ID PAD
                continue
            if attr_type == 1:
                value = anonymous.get(nla_text(value) or "", value)
            elif attr_type == 7:  # EXPR
                value = _strip_expr(value, anonymous)
            elif attr_type == 10:  # EXPRESSIONS
                value = _strip_exprs(value, anonymous)
        elif name == "objref" and attr_type in {4, 5}:  # SET_NAME SET_ID
            if attr_type == 5:
                continue
            value = anonymous.get(nla_text(value) or "", value)
        kept.append((attr_type, value))
    out.append((NFTA_EXPR_DATA, nla_encode(kept)))
    return nla_encode(out)


def _strip_exprs(payload: bytes, anonymous: dict[str, bytes]) -> bytes:
    return nla_encode(
        (NFTA_LIST_ELEM, _strip_expr(value, anonymous)) for _, value in nla_list(payload)
    )


def element_payloads(elements: bytes) -> list[bytes]:
    """The canonical bytes of each element in one NFTA_SET_ELEM_LIST_ELEMENTS payload: its
    attributes (key, key end, flags, data/verdict, timeout, userdata, objref) as the kernel
    encodes them, without expiry timer and stateful expressions.

    Fast path: when every element has the same length and the same top-level attribute
    headers as the first (checked with strided slices, in C) and the first has no volatile
    attribute, the elements are sliced out as they are; otherwise walked one by one."""
    size = len(elements)
    if size < 4:
        return []
    first_len = NLA_HDR.unpack_from(elements, 0)[0]
    stride = _align4(first_len)
    if first_len >= 4 and size % stride == 0:
        count = size // stride
        headers = [0, 1, 2, 3]
        offset, uniform = 4, True
        while offset + 4 <= first_len:
            length, attr_type = NLA_HDR.unpack_from(elements, offset)
            if length < 4 or (attr_type & NLA_TYPE_MASK) in ELEM_VOLATILE:
                uniform = False
                break
            headers += range(offset, offset + 4)
            offset += _align4(length)
        if uniform and all(elements[h::stride] == elements[h : h + 1] * count for h in headers):
            return [elements[i + 4 : i + first_len] for i in range(0, size, stride)]
    out = []
    for _, element in nla_list(elements):
        parts, offset, dropped = [], 0, False
        while offset + 4 <= len(element):
            length, attr_type = NLA_HDR.unpack_from(element, offset)
            if length < 4:
                break
            if (attr_type & NLA_TYPE_MASK) in ELEM_VOLATILE:
                dropped = True
            else:
                parts.append(element[offset : offset + _align4(length)])
            offset += _align4(length)
        out.append(b"".join(parts) if dropped else element)
    return out


def multiset_sum(payloads: list[bytes]) -> int:
    """sum(int.from_bytes(sha256(p), "little")) mod 2**256, summed in four 64-bit lanes."""
    sha = hashlib.sha256
    lanes = array.array("Q")
    lanes.frombytes(b"".join([sha(p).digest() for p in payloads]))
    if sys.byteorder == "big":
        lanes.byteswap()
    total = 0
    for k in range(4):
        total += sum(lanes[k::4]) << (64 * k)
    return total % MOD256


class RawTable:
    """One portal table as the kernel dumps it."""

    def __init__(self, family: int, name: str, attrs: list[tuple[int, bytes]]):
        self.family, self.name, self.attrs = family, name, attrs

    @property
    def where(self) -> str:
        return f"nft:{NFPROTO_NAMES.get(self.family, self.family)} {self.name}"


def _canon(attrs: Iterable[tuple[int, bytes]], volatile: frozenset[int]) -> bytes:
    return nla_encode((t, v) for t, v in attrs if t not in volatile)


def _set_declaration(attrs: list[tuple[int, bytes]], anonymous: dict[str, bytes]) -> bytes:
    kept = []
    for attr_type, value in attrs:
        if attr_type in SET_VOLATILE:
            continue
        if attr_type == NFTA_SET_EXPR:
            value = _strip_expr(value, anonymous)
        elif attr_type == NFTA_SET_EXPRESSIONS:
            value = _strip_exprs(value, anonymous)
        kept.append((attr_type, value))
    return nla_encode(kept)


def _set_kind(attrs: dict[int, bytes]) -> str:
    return "map" if nla_be32(attrs.get(NFTA_SET_FLAGS)) & (NFT_SET_MAP | NFT_SET_OBJECT) else "set"


def netlink_set_digest(
    nl: NftNetlink, table: RawTable, attrs: list[tuple[int, bytes]]
) -> tuple[bytes, int, int]:
    """(declaration bytes, multiset sum, count) of one set: its elements dumped by netlink.
    A dynamic set (the conntrack quotas) is filled by the data path, not by the portal: its
    declaration is content, its elements are not."""
    by_type = dict(attrs)
    name = nla_text(by_type.get(NFTA_SET_NAME)) or ""
    if nla_be32(by_type.get(NFTA_SET_FLAGS)) & NFT_SET_EVAL:
        return _set_declaration(attrs, {}), 0, 0
    request = nla_str(NFTA_SET_ELEM_LIST_TABLE, table.name) + nla_str(NFTA_SET_ELEM_LIST_SET, name)
    total = count = 0
    for _family, payload in nl.request(NFT_MSG_GETSETELEM, table.family, request):
        elements = nla_first(payload, NFTA_SET_ELEM_LIST_ELEMENTS)
        if elements is None:
            continue
        canon = element_payloads(elements)
        total += multiset_sum(canon)
        count += len(canon)
    return _set_declaration(attrs, {}), total % MOD256, count


def netlink_set_part(declaration: bytes, total: int, count: int) -> str:
    return set_part_from(hashlib.sha256(declaration).hexdigest(), total, count)


def set_part_from(declaration_sha: str, total: int, count: int) -> str:
    """A set/map part: sha256 of its declaration's hash, the multiset sum and the count (what
    the state records per set, so that element events can update it without a dump)."""
    return sha256(f"{declaration_sha}\n{total % MOD256:064x}\n{count}")


def set_record(declaration: bytes, total: int, count: int, flags: int) -> list:
    return [hashlib.sha256(declaration).hexdigest(), f"{total % MOD256:064x}", count, flags]


def netlink_tables(nl: NftNetlink, prefix: str) -> list[RawTable]:
    tables = []
    for family, payload in nl.request(NFT_MSG_GETTABLE, 0):
        attrs = nla_list(payload)
        name = nla_text(dict(attrs).get(NFTA_TABLE_NAME)) or ""
        if name.startswith(prefix):
            tables.append(RawTable(family, name, attrs))
    return tables


def netlink_sets(nl: NftNetlink, table: RawTable) -> list[list[tuple[int, bytes]]]:
    return [
        attrs
        for attrs in nl.dump(NFT_MSG_GETSET, table.family, nla_str(NFTA_SET_TABLE, table.name))
        if nla_text(dict(attrs).get(NFTA_SET_TABLE)) == table.name
    ]


def netlink_table_parts(nl: NftNetlink, table: RawTable, sets: dict[str, list]) -> dict[str, str]:
    """The digest parts of one table: each named set/map, each chain (declaration + rules in
    order), the table itself (flags, userdata, named objects, flowtables). ``sets`` receives
    each named set's record (declaration hash, multiset sum, count, flags)."""
    parts: dict[str, str] = {}
    anonymous: dict[str, bytes] = {}
    for attrs in netlink_sets(nl, table):
        by_type = dict(attrs)
        name = nla_text(by_type.get(NFTA_SET_NAME)) or ""
        declaration, total, count = netlink_set_digest(nl, table, attrs)
        if nla_be32(by_type.get(NFTA_SET_FLAGS)) & NFT_SET_ANONYMOUS:
            without_name = _canon(nla_list(declaration), frozenset({NFTA_SET_NAME}))
            anonymous[name] = b"anon:" + netlink_set_part(without_name, total, count).encode()
        else:
            key = f"{table.where} {_set_kind(by_type)} {name}"
            parts[key] = netlink_set_part(declaration, total, count)
            sets[key] = set_record(declaration, total, count, nla_be32(by_type.get(NFTA_SET_FLAGS)))
    rules: dict[str, list[bytes]] = {}
    for attrs in nl.dump(NFT_MSG_GETRULE, table.family, nla_str(NFTA_RULE_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_RULE_TABLE)) != table.name:
            continue
        kept = [
            (t, _strip_exprs(v, anonymous) if t == NFTA_RULE_EXPRESSIONS else v)
            for t, v in attrs
            if t in RULE_KEPT
        ]
        rules.setdefault(nla_text(by_type.get(NFTA_RULE_CHAIN)) or "", []).append(nla_encode(kept))
    for attrs in nl.dump(NFT_MSG_GETCHAIN, table.family, nla_str(NFTA_CHAIN_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_CHAIN_TABLE)) != table.name:
            continue
        name = nla_text(by_type.get(NFTA_CHAIN_NAME)) or ""
        body = nla(1, _canon(attrs, CHAIN_VOLATILE)) + b"".join(
            nla(2, rule) for rule in rules.get(name, [])
        )
        parts[f"{table.where} chain {name}"] = hashlib.sha256(body).hexdigest()
    items = [nla(1, _canon(table.attrs, TABLE_VOLATILE))]
    objects = []
    for attrs in nl.dump(NFT_MSG_GETOBJ, table.family, nla_str(NFTA_OBJ_TABLE, table.name)):
        by_type = dict(attrs)
        if nla_text(by_type.get(NFTA_OBJ_TABLE)) != table.name:
            continue
        kind = nla_be32(by_type.get(NFTA_OBJ_TYPE))
        kept = []
        for attr_type, value in attrs:
            if attr_type in OBJ_VOLATILE or (
                attr_type == NFTA_OBJ_DATA and kind == NFT_OBJECT_COUNTER
            ):
                continue
            if attr_type == NFTA_OBJ_DATA and kind == NFT_OBJECT_QUOTA:
                value = _strip_expr(nla(1, b"quota") + nla(2, value), {})
            kept.append((attr_type, value))
        objects.append(nla(2, nla_encode(kept)))
    for attrs in nl.dump(
        NFT_MSG_GETFLOWTABLE, table.family, nla_str(NFTA_FLOWTABLE_TABLE, table.name)
    ):
        if nla_text(dict(attrs).get(NFTA_FLOWTABLE_TABLE)) == table.name:
            objects.append(nla(3, _canon(attrs, FLOWTABLE_VOLATILE)))
    parts[f"{table.where} table"] = hashlib.sha256(b"".join(items + sorted(objects))).hexdigest()
    return parts


def netlink_parts(prefix: str, attempts: int = 3) -> tuple[dict[str, str], dict[str, list]]:
    """Digest parts of every portal table, read in one rule-set generation (retried when the
    generation moves or a dump is interrupted)."""
    with NftNetlink() as nl:
        for attempt in range(attempts):
            try:
                before = nl.generation()
                parts: dict[str, str] = {}
                sets: dict[str, list] = {}
                for table in netlink_tables(nl, prefix):
                    parts.update(netlink_table_parts(nl, table, sets))
                if nl.generation() == before:
                    return parts, sets
            except DumpInterrupted:
                if attempt == attempts - 1:
                    raise
        raise DumpInterrupted(f"the rule set kept changing during {attempts} dumps")


def netlink_set_parts(
    prefix: str, wanted: set[tuple[str, str, str]], sets: dict[str, list]
) -> dict[str, str] | None:
    """Parts of just the named sets/maps ((family, table, set)), their records into ``sets``;
    None when one is missing or anonymous (then the caller reads everything)."""
    parts: dict[str, str] = {}
    with NftNetlink() as nl:
        by_table: dict[tuple[str, str], set[str]] = {}
        for family, table, name in wanted:
            by_table.setdefault((family, table), set()).add(name)
        for (family, table_name), names in sorted(by_table.items()):
            if family not in NFPROTO or not table_name.startswith(prefix):
                return None
            table = RawTable(NFPROTO[family], table_name, [])
            found = {
                nla_text(dict(attrs).get(NFTA_SET_NAME)): attrs for attrs in netlink_sets(nl, table)
            }
            for name in sorted(names):
                attrs = found.get(name)
                if attrs is None or nla_be32(dict(attrs).get(NFTA_SET_FLAGS)) & NFT_SET_ANONYMOUS:
                    return None
                declaration, total, count = netlink_set_digest(nl, table, attrs)
                key = f"{table.where} {_set_kind(dict(attrs))} {name}"
                parts[key] = netlink_set_part(declaration, total, count)
                flags = nla_be32(dict(attrs).get(NFTA_SET_FLAGS))
                sets[key] = set_record(declaration, total, count, flags)
    return parts


NFNLGRP_NFTABLES = 7
SOL_NETLINK, NETLINK_ADD_MEMBERSHIP = 270, 1
NFT_MSG_NEWSETELEM, NFT_MSG_NEWGEN, NFT_MSG_DELSETELEM = 12, 15, 14
EVENTS_RECV_BUFFER = 64 << 20


class ElementEvents:
    """Listens to the kernel's nf_tables notifications (NFNLGRP_NFTABLES) around one load:
    each committed NEWSETELEM/DELSETELEM carries the elements exactly as a dump encodes them,
    so the multiset sum of a set can be moved by them instead of dumping the set again."""

    def __init__(self):
        self.nl = NftNetlink()
        sock = self.nl.sock
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, EVENTS_RECV_BUFFER)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, EVENTS_RECV_BUFFER)
        sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)

    def close(self) -> None:
        self.nl.close()

    def collect(self) -> dict[tuple[str, str, str], list[int]] | None:
        """{(family, table, set): [sum delta, count delta]} of what was committed since the
        socket was opened; None when anything else changed, a notification was lost (ENOBUFS)
        or no commit was seen (then the caller dumps)."""
        sock, buffer = self.nl.sock, self.nl.buffer
        sock.setblocking(False)
        deltas: dict[tuple[str, str, str], list[int]] = {}
        committed = False
        while True:
            try:
                size = sock.recv_into(buffer, 0, socket.MSG_TRUNC)
            except BlockingIOError:
                break
            except OSError:  # ENOBUFS: the queue overflowed, events were lost
                return None
            if size > len(buffer):
                return None
            offset = 0
            while offset + 16 <= size:
                length, msg_type, _flags, _seq, _pid = NLMSGHDR.unpack_from(buffer, offset)
                if length < 16 or offset + length > size:
                    return None
                family, start = buffer[offset + 16], offset
                offset += _align4(length)
                if msg_type >> 8 != NFNL_SUBSYS_NFTABLES:
                    continue
                msg = msg_type & 0xFF
                if msg == NFT_MSG_NEWGEN:
                    committed = True
                    continue
                if msg not in (NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM):
                    return None  # a rule, chain, set, table, object changed: read it all
                attrs = dict(nla_list(bytes(buffer[start + 20 : start + length])))
                key = (
                    NFPROTO_NAMES.get(family, str(family)),
                    nla_text(attrs.get(NFTA_SET_ELEM_LIST_TABLE)) or "",
                    nla_text(attrs.get(NFTA_SET_ELEM_LIST_SET)) or "",
                )
                canon = element_payloads(attrs.get(NFTA_SET_ELEM_LIST_ELEMENTS) or b"")
                sign = 1 if msg == NFT_MSG_NEWSETELEM else -1
                delta = deltas.setdefault(key, [0, 0])
                delta[0] += sign * multiset_sum(canon)
                delta[1] += sign * len(canon)
        return deltas if committed else None


# --------------------------------------------------------------------------------------------
# Content digest: what actually runs, independent of order, counters and handles
# --------------------------------------------------------------------------------------------


def canon_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def strip_volatile(obj):
    """A JSON object of `nft -j` without handles, counter values, quota use and expiry times;
    anonymous set contents inside rules are sorted."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in {"handle", "expires", "used", "used_unit"}:
                continue
            if key == "counter" and isinstance(value, dict) and set(value) <= {"packets", "bytes"}:
                out[key] = None  # the rule/element counts; what it counted is not content
                continue
            if key == "set" and isinstance(value, list):
                out[key] = sorted((strip_volatile(v) for v in value), key=canon_json)
                continue
            out[key] = strip_volatile(value)
        return out
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj


def canon_element(element) -> str:
    """The canonical text of one set/map element as `nft -j` prints it, whether it comes from a
    full listing (`list table`/`list set`) or from `get element`."""
    return canon_json(strip_volatile(element))


def element_hash(canon: str) -> int:
    return int.from_bytes(hashlib.sha256(canon.encode()).digest(), "big")


def multiset_digest(elements: Iterable) -> tuple[int, int]:
    """(sum of sha256(canonical element) mod 2**256, count): order-independent, and updatable
    element by element (add the hash of an added element, subtract that of a removed one)."""
    total = 0
    count = 0
    for element in elements:
        total += element_hash(canon_element(element))
        count += 1
    return total % MOD256, count


def set_part(declaration: dict, total: int, count: int) -> str:
    return sha256(f"{canon_json(declaration)}\n{total:064x}\n{count}")


def nft_parts(tables_json: Iterable[dict]) -> dict[str, str]:
    """Digest parts of the portal nft tables from `nft -j list table` outputs."""
    parts: dict[str, str] = {}
    for listing in tables_json:
        chains: dict[str, dict] = {}
        rules: dict[str, list] = {}
        table_items: list = []
        for item in listing.get("nftables", []):
            (kind, body), *_ = item.items()
            if kind == "metainfo":
                continue
            where = f"nft:{body.get('family')} {body.get('table', body.get('name'))}"
            if kind == "table":
                table_items.append(strip_volatile(body))
            elif kind == "chain":
                chains[body["name"]] = strip_volatile(body)
            elif kind == "rule":
                rules.setdefault(body["chain"], []).append(strip_volatile(body))
            elif kind in {"set", "map"}:
                declaration = strip_volatile({k: v for k, v in body.items() if k != "elem"})
                dynamic = "dynamic" in (body.get("flags") or [])  # filled by the data path
                total, count = multiset_digest([] if dynamic else body.get("elem", []))
                parts[f"{where} {kind} {body['name']}"] = set_part(declaration, total, count)
            else:  # flowtables, named counters/quotas/ct objects: declaration only
                body = {k: v for k, v in body.items() if k not in {"packets", "bytes"}}
                table_items.append({kind: strip_volatile(body)})
        for name, chain in chains.items():
            where = f"nft:{chain.get('family')} {chain.get('table')}"
            parts[f"{where} chain {name}"] = sha256(canon_json([chain, rules.get(name, [])]))
        if table_items:
            first = table_items[0]
            where = f"nft:{first.get('family')} {first.get('name')}"
            parts[f"{where} table"] = sha256(canon_json(table_items))
    return parts


def digest_total(parts: dict[str, str]) -> str:
    return sha256("".join(f"{key}\t{value}\n" for key, value in sorted(parts.items())))


# --------------------------------------------------------------------------------------------
# Verbs
# --------------------------------------------------------------------------------------------


class ArgParser(argparse.ArgumentParser):
    def error(self, message: str):  # never print usage and exit(2) behind our back
        raise refused(f"{self.prog}: {message}")


def parse_verb_args(verb: str, args: list[str]) -> argparse.Namespace:
    parser = ArgParser(prog=verb, add_help=False, allow_abbrev=False)
    if verb in {"check", "apply"}:
        parser.add_argument("--incremental", action="store_true")
    if verb == "apply":
        parser.add_argument("--confirm-within", type=int, required=True)
        parser.add_argument("--version")
        parser.add_argument("--staged")
        parser.add_argument("--health-sample-ms", type=int)
    if verb == "apply-bundle":
        parser.add_argument("--confirm-within", type=int, required=True)
        parser.add_argument("--health-sample-ms", type=int)
    if verb == "health":
        parser.add_argument("--sample-ms", type=int, default=200)
        parser.add_argument("--no-digest", action="store_true")
    ns = parser.parse_args(args)
    if verb == "apply-bundle" and not 1 <= ns.confirm_within <= MAX_CONFIRM_WITHIN:
        raise refused(f"--confirm-within must be 1..{MAX_CONFIRM_WITHIN} seconds")
    if verb == "apply":
        if not 1 <= ns.confirm_within <= MAX_CONFIRM_WITHIN:
            raise refused(f"--confirm-within must be 1..{MAX_CONFIRM_WITHIN} seconds")
        if ns.version is not None and not re.fullmatch(r"[A-Za-z0-9._:+/-]{1,128}", ns.version):
            raise refused("--version: 1-128 characters of [A-Za-z0-9._:+/-]")
        if ns.staged is not None and not re.fullmatch(r"[0-9a-f]{64}", ns.staged):
            raise refused("--staged: a sha256 in lowercase hex")
    if verb == "health" and not 0 <= ns.sample_ms <= 2000:
        raise refused("--sample-ms must be 0..2000")
    if (
        verb in {"apply", "apply-bundle"}
        and ns.health_sample_ms is not None
        and not 0 <= ns.health_sample_ms <= 2000
    ):
        raise refused("--health-sample-ms must be 0..2000")
    return ns


def read_stdin(limit: int) -> str:
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise refused(f"input larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refused("input is not UTF-8") from exc


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def verb_check(host: Host, opts, limit: int) -> dict:
    text = read_stdin(limit)
    check_scope(text, host.prefix)
    digest = sha256(text)
    with host.locked():
        host.write_file(host.upload_nft, text)
        tx = host.transaction(host.upload_nft, replace=not opts.incremental)
        result = host.nft_file(tx, check_only=True)
        if result.returncode != 0:
            raise HelperError(
                EXIT_FAILED, "failed", "nft rejected the rule set", result.stderr.strip()
            )
        host.write_file(host.staged_nft, text)
    host.log({"event": "checked", "sha256": digest, "bytes": len(text)})
    return {"sha256": digest, "bytes": len(text), "staged": True}


def _check_phase(error: HelperError) -> HelperError:
    error.phase = "check"
    return error


def verb_apply(host: Host, opts, limit: int) -> dict:
    """Text on stdin is checked (scope, then ``nft -c`` of the very transaction) inside the same
    lock before anything is saved or armed: one round trip does what ``check`` + ``apply
    --staged`` do. A failure before the load answers ``"phase": "check"`` (nothing changed)."""
    if opts.staged:
        try:
            text = host.staged_nft.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise HelperError(EXIT_CONFLICT, "conflict", "nothing staged on this host") from exc
        if sha256(text) != opts.staged:
            raise HelperError(EXIT_CONFLICT, "conflict", "the staged rule set has another sha256")
        check_scope(text, host.prefix)
    else:
        text = read_stdin(limit)
        try:
            check_scope(text, host.prefix)
        except HelperError as exc:
            raise _check_phase(exc) from None
    digest = sha256(text)
    check_seconds = None
    with host.locked():
        started = time.monotonic()
        host.write_file(host.upload_nft, text)
        if not opts.staged:  # staged text was checked by `check`
            result = host.nft_file(
                host.transaction(host.upload_nft, replace=not opts.incremental), check_only=True
            )
            if result.returncode != 0:
                host.log({"event": "apply-refused-by-check", "sha256": digest})
                raise _check_phase(
                    HelperError(
                        EXIT_FAILED,
                        "failed",
                        "nft rejected the rule set; nothing was applied",
                        result.stderr.strip(),
                    )
                )
            check_seconds = round(time.monotonic() - started, 3)
            started = time.monotonic()
        old_pending = host.read_json(host.pending_file)
        current_state = host.read_json(host.state_file) or {}
        if old_pending:
            # Still unconfirmed: keep the rollback point of the last confirmed state.
            host.kill_timer(old_pending)
        else:
            host.write_file(host.rollback_nft, host.dump_portal_tables())
            host.write_json(host.rollback_json, current_state)
            if host.rollback_dir.is_symlink():  # an older bundle point is superseded
                host.rollback_dir.unlink()
                drop_stale_rollback_dirs(host)
        token = secrets.token_hex(16)
        deadline = time.time() + opts.confirm_within
        pending = {
            "token": token,
            "armed_at": now_iso(),
            "deadline": deadline,
            "confirm_within": opts.confirm_within,
            "sha256": digest,
            "version": opts.version,
        }
        host.write_json(host.pending_file, pending)
        pending["timer_pid"] = host.arm_timer(token)
        host.write_json(host.pending_file, pending)

        tx = host.transaction(host.upload_nft, replace=not opts.incremental)
        host.set_nft_current(None)  # the old verb does not keep it: a bundle point dumps again
        result = host.nft_file(tx, check_only=False)
        if result.returncode != 0:
            if not old_pending:
                host.kill_timer(pending)
                host.pending_file.unlink(missing_ok=True)
            host.log({"event": "apply-failed", "sha256": digest})
            raise HelperError(
                EXIT_FAILED,
                "failed",
                "nft rejected the rule set; nothing was applied",
                result.stderr.strip(),
            )
        loaded = host.loaded_version()
        state = {
            "version": opts.version or loaded["version"],
            "sha256": digest if not opts.incremental else None,
            "last_sha256": digest,
            "mode": "incremental" if opts.incremental else "replace",
            "applied_at": now_iso(),
            "confirmed": False,
            "base": current_state.get("version") if opts.incremental else None,
        }
        host.write_json(host.state_file, state)
        elapsed = round(time.monotonic() - started, 3)
        # After the load, under the same lock: nothing else can change the host in between.
        health = (
            collect_health(host, opts.health_sample_ms)
            if opts.health_sample_ms is not None
            else None
        )
    host.log({"event": "applied", "sha256": digest, "version": state["version"], "s": elapsed})
    answer = {
        "version": loaded["version"] or state["version"],
        "loaded": loaded,
        "sha256": digest,
        "mode": state["mode"],
        "confirm_deadline": dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat(),
        "confirm_within": opts.confirm_within,
        "apply_seconds": elapsed,
        "check_seconds": check_seconds,
    }
    if health is not None:
        answer["health"] = health
    return answer


def verb_confirm(host: Host, opts, limit: int) -> dict:
    with host.locked():
        pending = host.read_json(host.pending_file)
        state = host.read_json(host.state_file) or {}
        if not pending:
            last = state.get("last_event") or {}
            raise HelperError(
                EXIT_CONFLICT,
                "conflict",
                "nothing to confirm"
                + (
                    f" (last event: {last.get('event')} at {last.get('at')}: {last.get('reason')})"
                    if last
                    else ""
                ),
            )
        host.kill_timer(pending)
        host.pending_file.unlink()
        state.update(confirmed=True, confirmed_at=now_iso(), last_event=None)
        host.write_json(host.state_file, state)
    host.log({"event": "confirmed", "version": state.get("version")})
    return {"version": state.get("version"), "confirmed": True}


def verb_rollback(host: Host, opts, limit: int) -> dict:
    with host.locked():
        pending = host.read_json(host.pending_file)
        restored = host.rollback_now("requested by the portal")
        if pending:
            host.kill_timer(pending)
            host.pending_file.unlink(missing_ok=True)
    answer = {"version": restored.get("version"), "rolled_back": True, "was_pending": bool(pending)}
    if "_restore" in restored:  # a bundle point: tc verified against the recorded state
        answer.update(restored["_restore"])
    return answer


def verb_version(host: Host, opts, limit: int) -> dict:
    loaded = host.loaded_version()
    state = host.read_json(host.state_file)
    pending = host.read_json(host.pending_file)
    state_version = (state or {}).get("version")
    version = current_version(loaded, state)
    return {
        "version": version,
        "source": loaded["source"] or ("state" if state_version else None),
        "loaded": loaded,
        "state": state,
        "pending_confirm": _pending_summary(pending),
        "drift": bool(loaded["version"] and state_version and loaded["version"] != state_version),
    }


def current_version(loaded: dict, state: dict | None) -> str | None:
    """The version this host runs: a bundle's is in the state (the content digest, not a
    marker in the kernel, says whether the kernel still matches it); older pushes carried it
    as a marker element, read back from the kernel."""
    state = state or {}
    if state.get("bundle"):
        return state.get("version")
    return loaded["version"] or state.get("version")


def _pending_summary(pending: dict | None) -> dict | None:
    if not pending:
        return None
    return {
        "armed_at": pending.get("armed_at"),
        "seconds_left": round(max(0.0, pending["deadline"] - time.time()), 1),
        "sha256": pending.get("sha256"),
        "version": pending.get("version"),
    }


def read_cpu_times() -> dict[str, list[int]]:
    cpus = {}
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("cpu"):
                name, *values = line.split()
                cpus[name] = [int(v) for v in values]
    return cpus


def read_interfaces() -> dict[str, dict[str, int]]:
    fields = [
        "rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo", "rx_frame",
        "rx_compressed", "rx_multicast", "tx_bytes", "tx_packets", "tx_errors", "tx_dropped",
        "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
    ]  # fmt: skip
    keep = {"rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "tx_bytes", "tx_packets",
            "tx_errors", "tx_dropped"}  # fmt: skip
    result = {}
    with open("/proc/net/dev", encoding="ascii") as fh:
        for line in fh.readlines()[2:]:
            name, _, rest = line.partition(":")
            values = [int(v) for v in rest.split()]
            result[name.strip()] = {k: v for k, v in zip(fields, values, strict=False) if k in keep}
    return result


CONNTRACK_STATS = ("drop", "early_drop", "insert_failed", "invalid")


def read_conntrack_stats() -> dict[str, int]:
    """The conntrack statistics that tell a full or flooded table, summed over the CPUs
    (/proc/net/stat/nf_conntrack: one hex row per CPU)."""
    try:
        lines = Path("/proc/net/stat/nf_conntrack").read_text().split("\n")
    except OSError:
        return {}
    header = lines[0].split()
    totals = dict.fromkeys(CONNTRACK_STATS, 0)
    for line in lines[1:]:
        values = line.split()
        if len(values) != len(header):
            continue
        for name in CONNTRACK_STATS:
            if name in header:
                totals[name] += int(values[header.index(name)], 16)
    return totals


QUOTA_HIT_SETS = ("quota_hit4", "quota_hit6")


def read_quota_hits(host: Host, limit: int = 50) -> list[dict]:
    """Who hit a conntrack quota in the last hour (the rule set's dynamic quota_hit sets): the
    member's public IPv4 or /64 and the packets dropped, most first."""
    hits = []
    for name in QUOTA_HIT_SETS:
        result = run(["nft", "-j", "list", "set", "inet", f"{host.prefix}fw", name], timeout=20)
        if result.returncode != 0:
            continue
        try:
            items = json.loads(result.stdout).get("nftables", [])
        except ValueError:
            continue
        for item in items:
            for elem in (item.get("set") or {}).get("elem", []):
                e = elem.get("elem") if isinstance(elem, dict) else None
                if isinstance(e, dict) and isinstance(e.get("val"), str):
                    packets = int(((e.get("counter") or {}).get("packets")) or 0)
                    hits.append({"address": e["val"], "packets": packets})
    hits.sort(key=lambda h: (-h["packets"], h["address"]))
    return hits[:limit]


ACCT_SETS = ("acct4_in", "acct4_out", "acct6n_in", "acct6n_out", "acct6_in", "acct6_out")
ACCT_PRUNE_AFTER = 3600  # keys gone from the rule set leave the carried totals after this


def _counter_values(expressions: bytes) -> tuple[int, int] | None:
    """(packets, bytes) of the counter among an element's expressions."""
    for _, expr in nla_list(expressions):
        attrs = dict(nla_list(expr))
        if nla_text(attrs.get(NFTA_EXPR_NAME)) == "counter":
            data = dict(nla_list(attrs.get(NFTA_EXPR_DATA) or b""))
            octets, packets = data.get(NFTA_COUNTER_BYTES), data.get(NFTA_COUNTER_PACKETS)
            if octets is not None and packets is not None:
                return int.from_bytes(packets, "big"), int.from_bytes(octets, "big")
    return None


def _key_text(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _nla_spans(buf: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """attribute type -> (payload start, payload end) of the attributes in buf[start:end]."""
    spans: dict[int, tuple[int, int]] = {}
    offset = start
    while offset + 4 <= end:
        length, attr_type = NLA_HDR.unpack_from(buf, offset)
        if length < 4 or offset + length > end:
            break
        spans.setdefault(attr_type & NLA_TYPE_MASK, (offset + 4, offset + length))
        offset += _align4(length)
    return spans


def _first_layout(elements: bytes, end: int) -> tuple[tuple[int, int], int, int] | None:
    """In the first element: the span of the key bytes and where its counter's bytes and
    packets values (u64 each) start, or None when it has no plain key and counter."""
    attrs = _nla_spans(elements, 4, end)
    if NFTA_SET_ELEM_KEY not in attrs:
        return None
    key = _nla_spans(elements, *attrs[NFTA_SET_ELEM_KEY]).get(NFTA_DATA_VALUE)
    if NFTA_SET_ELEM_EXPR in attrs:  # one expression: the kernel sends it without the list
        expr = attrs[NFTA_SET_ELEM_EXPR]
    elif NFTA_SET_ELEM_EXPRESSIONS in attrs:
        expr = _nla_spans(elements, *attrs[NFTA_SET_ELEM_EXPRESSIONS]).get(NFTA_LIST_ELEM)
    else:
        return None
    if key is None or key[1] - key[0] not in (4, 16) or expr is None:
        return None
    parts = _nla_spans(elements, *expr)
    if NFTA_EXPR_NAME not in parts or NFTA_EXPR_DATA not in parts:
        return None
    if elements[slice(*parts[NFTA_EXPR_NAME])].rstrip(b"\0") != b"counter":
        return None
    data = _nla_spans(elements, *parts[NFTA_EXPR_DATA])
    octets, packets = data.get(NFTA_COUNTER_BYTES), data.get(NFTA_COUNTER_PACKETS)
    if (
        octets is None
        or packets is None
        or octets[1] - octets[0] != 8
        or packets[1] - packets[0] != 8
    ):
        return None
    return key, octets[0], packets[0]


def acct_elements(elements: bytes) -> dict[str, list[int]]:
    """{address: [packets, bytes]} of one NFTA_SET_ELEM_LIST_ELEMENTS payload of an accounting
    set (key and counter of each element).

    Fast path, as in `element_payloads`: when every element has the layout of the first (every
    byte but the key and the counter values equal at the same offset, checked with strided
    slices in C), keys and values are sliced out at the first element's offsets; otherwise each
    element is walked."""
    size = len(elements)
    if size < 4:
        return {}
    first_len = NLA_HDR.unpack_from(elements, 0)[0]
    stride = _align4(first_len)
    layout = _first_layout(elements, first_len) if 4 <= first_len <= size else None
    if layout is not None and size % stride == 0:
        (k0, k1), b0, p0 = layout
        count = size // stride
        volatile = set(range(k0, k1)) | set(range(b0, b0 + 8)) | set(range(p0, p0 + 8))
        if all(
            elements[h::stride] == elements[h : h + 1] * count
            for h in range(stride)
            if h not in volatile
        ):
            family = socket.AF_INET if k1 - k0 == 4 else socket.AF_INET6
            ntop, from_bytes = socket.inet_ntop, int.from_bytes
            return {
                ntop(family, elements[i + k0 : i + k1]): [
                    from_bytes(elements[i + p0 : i + p0 + 8], "big"),
                    from_bytes(elements[i + b0 : i + b0 + 8], "big"),
                ]
                for i in range(0, size, stride)
            }
    out: dict[str, list[int]] = {}
    for _, element in nla_list(elements):
        key = nla_first(element, NFTA_SET_ELEM_KEY)
        raw = nla_first(key, NFTA_DATA_VALUE) if key else None
        exprs = nla_first(element, NFTA_SET_ELEM_EXPRESSIONS) or b""
        single = nla_first(element, NFTA_SET_ELEM_EXPR)
        counted = _counter_values(exprs) or (
            _counter_values(nla_encode([(NFTA_LIST_ELEM, single)])) if single else None
        )
        if raw and len(raw) in (4, 16):
            out[_key_text(raw)] = list(counted or (0, 0))
    return out


def read_acct_netlink(host: Host) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    table = f"{host.prefix}fw"
    with NftNetlink() as nl:
        present = {
            nla_text(dict(attrs).get(NFTA_SET_NAME))
            for attrs in netlink_sets(nl, RawTable(NFPROTO["inet"], table, []))
        }
        for name in ACCT_SETS:
            if name not in present:
                continue
            request = nla_str(NFTA_SET_ELEM_LIST_TABLE, table) + nla_str(
                NFTA_SET_ELEM_LIST_SET, name
            )
            counters: dict[str, list[int]] = {}
            for _family, payload in nl.request(NFT_MSG_GETSETELEM, NFPROTO["inet"], request):
                elements = nla_first(payload, NFTA_SET_ELEM_LIST_ELEMENTS)
                if elements is not None:
                    counters.update(acct_elements(elements))
            out[name] = counters
    return out


def read_acct_json(host: Host) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for name in ACCT_SETS:
        result = run(["nft", "-j", "list", "set", "inet", f"{host.prefix}fw", name], timeout=120)
        if result.returncode != 0:
            continue
        try:
            items = json.loads(result.stdout).get("nftables", [])
        except ValueError:
            continue
        counters: dict[str, list[int]] = {}
        for item in items:
            for elem in (item.get("set") or {}).get("elem", []):
                e = elem.get("elem") if isinstance(elem, dict) else None
                if isinstance(e, dict) and isinstance(e.get("val"), str):
                    c = e.get("counter") or {}
                    counters[e["val"]] = [int(c.get("packets") or 0), int(c.get("bytes") or 0)]
        out[name] = counters
    return out


def read_acct_kernel(host: Host) -> dict[str, dict[str, list[int]]]:
    """{set: {key: [packets, bytes]}} of the accounting sets as the kernel counts them now
    (every element, zero or not); sets the loaded rule set lacks are left out. Netlink (about
    10x faster than `nft -j` at 100,000 members), `nft -j` when netlink fails or is switched off
    (--digest-source nft)."""
    if host.digest_source != "nft":
        for _ in range(3):
            try:
                return read_acct_netlink(host)
            except DumpInterrupted:
                continue
            except (NetlinkError, OSError):
                break
    return read_acct_json(host)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def read_acct_state(host: Host) -> dict:
    """The carried totals: {"epoch", "boot", "folded_at", "base": {set: {key: [p, b]}}}. A new
    epoch after a reboot (the kernel's counters restarted) or a lost file: the portal then
    takes the totals as new."""
    state = host.read_json(host.acct_file)
    if not state or state.get("boot") != boot_id() or not isinstance(state.get("base"), dict):
        state = {"epoch": secrets.token_hex(8), "boot": boot_id(), "folded_at": 0, "base": {}}
        host.write_json(host.acct_file, state, compact=True)
    return state


def fold_acct(host: Host, counted: dict[str, dict[str, list[int]]]) -> None:
    state = read_acct_state(host)
    base = state["base"]
    for name, counters in counted.items():
        carried = base.setdefault(name, {})
        for key, (packets, octets) in counters.items():
            if packets or octets:
                before = carried.get(key, [0, 0])
                carried[key] = [before[0] + packets, before[1] + octets]
    state["folded_at"] = int(time.time())
    host.write_json(host.acct_file, state, compact=True)
    host.log({"event": "traffic-carried", "keys": sum(len(c) for c in counted.values())})


def verb_traffic(host: Host, opts, limit: int) -> dict:
    """Totals per accounting key since the epoch (carried + kernel), non-zero ones only, as
    [key, packets, bytes] rows per set."""
    with host.locked():
        state = read_acct_state(host)
        kernel = read_acct_kernel(host)
        base = state["base"]
        sets: dict[str, list] = {}
        for name in ACCT_SETS:
            live = kernel.get(name, {})
            carried = base.get(name, {})
            rows = []
            for key in sorted(live.keys() | carried.keys()):
                p1, b1 = live.get(key, (0, 0))
                p2, b2 = carried.get(key, (0, 0))
                if p1 + p2 or b1 + b2:
                    rows.append([key, p1 + p2, b1 + b2])
            sets[name] = rows
        if base and time.time() - state.get("folded_at", 0) > ACCT_PRUNE_AFTER:
            pruned = False
            for name, carried in base.items():
                for key in [k for k in carried if k not in kernel.get(name, {})]:
                    del carried[key]
                    pruned = True
            if pruned:
                host.write_json(host.acct_file, state, compact=True)
    return {"epoch": state["epoch"], "at": now_iso(), "sets": sets}


def read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def verb_health(host: Host, opts, limit: int) -> dict:
    digest = None if opts.no_digest else digest_or_error(host)
    return collect_health(host, opts.sample_ms, digest=digest)


def collect_health(
    host: Host,
    sample_ms: int,
    *,
    digest: dict | None = None,
    ha: HaStatus | None = None,
) -> dict:
    """The `health` answer; softirq shares over `sample_ms` (0: no sample, no shares).
    ``digest``: the content digest to report (the old `apply` leaves it out: it costs a full
    read-back of the portal tables). ``ha``: a `portal-ha status` started earlier."""
    started = time.monotonic()
    before = read_cpu_times() if sample_ms else {}
    if sample_ms:
        time.sleep(sample_ms / 1000)
    after = read_cpu_times() if sample_ms else {}
    per_cpu = []
    for name, values in after.items():
        if name == "cpu" or name not in before:
            continue
        delta = [a - b for a, b in zip(values, before[name], strict=False)]
        total = sum(delta[:8]) or 1  # user nice system idle iowait irq softirq steal
        per_cpu.append(
            {
                "cpu": int(name[3:]),
                "softirq": round(delta[6] / total, 4),
                "irq": round(delta[5] / total, 4),
                "busy": round(1 - (delta[3] + delta[4]) / total, 4),
            }
        )
    count = read_int("/proc/sys/net/netfilter/nf_conntrack_count")
    maximum = read_int("/proc/sys/net/netfilter/nf_conntrack_max")
    load = Path("/proc/loadavg").read_text().split()
    state = host.read_json(host.state_file) or {}
    loaded = {"version": None, "source": None} if state.get("bundle") else host.loaded_version()
    pending = host.read_json(host.pending_file)
    answer = {
        "time": now_iso(),
        "uptime_seconds": float(Path("/proc/uptime").read_text().split()[0]),
        "conntrack": {
            "count": count,
            "max": maximum,
            "buckets": read_int("/proc/sys/net/netfilter/nf_conntrack_buckets"),
            "ratio": round(count / maximum, 6) if count is not None and maximum else None,
            "stats": read_conntrack_stats(),
            "quota_hits": read_quota_hits(host),
        },
        "softirq": {
            "sample_ms": sample_ms,
            "per_cpu": per_cpu,
            "max_share": max((c["softirq"] for c in per_cpu), default=0.0),
        },
        "loadavg": [float(x) for x in load[:3]],
        "interfaces": read_interfaces(),
        "version": current_version(loaded, state),
        "loaded": loaded,
        "confirmed": state.get("confirmed"),
        "pending_confirm": _pending_summary(pending),
        "collect_seconds": round(time.monotonic() - started, 3),
    }
    if ha is not None:
        answer["ha"] = ha_status_finish(ha)
    elif "conntrackd" in host.artefacts or "keepalived" in host.artefacts:
        answer["ha"] = ha_status(host)
    if digest is not None:
        answer["digest"] = public_digest(digest)
        recorded = ((state.get("digest") or {}).get("parts")) or {}
        if recorded and digest.get("parts"):
            keys = set(recorded) | set(digest["parts"])
            answer["digest_differs"] = sorted(
                k for k in keys if recorded.get(k) != digest["parts"].get(k)
            )
    return answer


HA_PROGRAM = HERE / "portal-ha"


def ha_status(host: Host) -> dict:
    """The pair's state on this host (deploy/firewall/portal-ha status): VRRP state per
    instance, whether keepalived and conntrackd run, conntrackd's sync statistics."""
    return ha_status_finish(ha_status_start(host))


def _portal_ha():
    """deploy/firewall/portal-ha as a module: its status runs in this process (a second
    interpreter cost ~50-80 ms of CPU on every apply). Its bytecode is cached like ours."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("portal_ha", str(HA_PROGRAM))
    spec = importlib.util.spec_from_loader("portal_ha", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class HaStatus(threading.Thread):
    """`portal-ha status` in a thread of this process (apply-bundle runs it alongside)."""

    def __init__(self, conf: Path, run_dir: Path) -> None:
        super().__init__(name="ha-status", daemon=True)
        self.conf, self.run_dir = conf, run_dir
        self.answer: dict = {"error": "portal-ha status did not answer within 20 s"}

    def run(self) -> None:
        try:
            self.answer = _portal_ha().status(self.conf, self.run_dir)
        except Exception as exc:  # reported in the answer: never fatal to an apply
            self.answer = {"error": f"portal-ha status failed: {exc}"[:300]}


def ha_status_start(host: Host) -> HaStatus:
    """Start reading the pair's state (portal-ha's status) alongside the caller's work."""
    spec = host.artefacts.get("conntrackd")
    conf = spec.path if spec else Path("/etc/conntrackd/conntrackd.conf")
    status = HaStatus(conf, host.ha_run_dir)
    status.start()
    return status


def ha_status_finish(status: HaStatus) -> dict:
    status.join(timeout=20)
    return status.answer


def verb_resync(host: Host, opts, limit: int) -> dict:
    """Ask the peer's conntrackd for a full resync of the connection states (staff action)."""
    spec = host.artefacts.get("conntrackd")
    if spec is None:
        raise refused("this host declares no conntrackd artefact (--artefacts)")
    result = run([sys.executable, str(HA_PROGRAM), "resync", str(spec.path)], timeout=30)
    if result.returncode != 0:
        raise HelperError(EXIT_FAILED, "failed", "conntrackd refused the resync",
                          (result.stderr or result.stdout).strip())  # fmt: skip
    host.log({"event": "resync-requested"})
    return {"resync": "requested", "ha": ha_status(host)}


def verb_tc_apply(host: Host, opts, limit: int) -> dict:
    text = read_stdin(limit)
    check_tc_batch(text)
    with host.locked():
        result = run(["tc", "-batch", "-"], stdin=text)
    if result.returncode != 0:
        raise HelperError(
            EXIT_FAILED,
            "failed",
            "tc rejected the batch (lines before the failing one were applied)",
            (result.stderr or result.stdout).strip(),
        )
    host.log({"event": "tc-applied", "sha256": sha256(text), "lines": text.count("\n")})
    return {"sha256": sha256(text), "lines": len(text.splitlines())}


DIGEST_SOURCES = ("auto", "netlink", "nft")


def nft_json_parts(host: Host) -> dict[str, str]:
    """The fallback: digest parts from `nft -j list table` (slow on big tables: nft 1.0.6
    loads its whole cache; parts differ from the netlink ones, never mix the two)."""
    listings = []
    for family, name in host.portal_tables():
        result = run(["nft", "-j", "list", "table", family, name])
        if result.returncode != 0:
            raise HelperError(
                EXIT_FAILED, "failed", f"nft -j list table {family} {name} failed", result.stderr
            )
        listings.append(json.loads(result.stdout or "{}"))
    return nft_parts(listings)


def nft_digest_parts(host: Host) -> tuple[dict[str, str], dict[str, list], str, str | None]:
    """(parts, set records, source, why the netlink reader was not used): netlink unless it
    fails (old kernel, no permission) or the host forces `--digest-source nft`."""
    fallback = None
    if host.digest_source != "nft":
        try:
            return (*netlink_parts(host.prefix), "netlink", None)
        except (OSError, NetlinkError, DumpInterrupted, struct.error, ValueError) as exc:
            if host.digest_source == "netlink":
                raise HelperError(EXIT_FAILED, "failed", f"netlink dump failed: {exc}") from exc
            fallback = f"netlink: {exc}"
    return nft_json_parts(host), {}, "nft", fallback


def tc_part(dev: str) -> str:
    return sha256(tc_canon(dev))


def file_part(art: FileArtefact) -> str:
    try:
        return hashlib.sha256(art.path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return "absent"


def compute_digest(host: Host) -> dict:
    """The content digest of everything the helper manages, read from what actually runs."""
    started = time.monotonic()
    parts, sets, source, fallback = nft_digest_parts(host)
    nft_seconds = time.monotonic() - started
    for dev in sorted(tc_devices(host.read_tc_current())):
        parts[f"tc:{dev}"] = tc_part(dev)
    for name, art in sorted(host.artefacts.items()):
        parts[f"file:{name}"] = file_part(art)
    answer = {
        "total": digest_total(parts),
        "parts": dict(sorted(parts.items())),
        "source": source,
        "mode": "full",
        "read": sorted(parts),
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "_sets": sets,  # recorded in the state, not answered (see public_digest)
    }
    if fallback:
        answer["fallback"] = fallback
    return answer


def public_digest(digest: dict) -> dict:
    return {k: v for k, v in digest.items() if not k.startswith("_")}


def recorded_digest(digest: dict) -> dict:
    """What state.json keeps of a digest: the parts and, per set, what the next increment
    needs to move its multiset sum by the kernel's element events."""
    return {
        "total": digest.get("total"),
        "parts": digest.get("parts"),
        "source": digest.get("source"),
        "sets": digest.get("_sets") or {},
    }


ELEMENT_STATEMENTS = frozenset({"add", "create", "delete", "destroy"})


def increment_sets(text: str) -> tuple[set[tuple[str, str, str]], bool] | None:
    """(the (family, table, set) an nft increment touches, whether it flushes one), or None
    when it does anything but add/delete elements or flush a set (then all is read again)."""
    touched = set()
    flushes = False
    for _line, tokens in _nft_statements(text):
        head, what = tokens[0], tokens[1] if len(tokens) > 1 else ""
        if head in {"define", "redefine", "undefine"}:
            continue
        if not (
            (head in ELEMENT_STATEMENTS and what == "element")
            or (head == "flush" and what in {"set", "map"})
        ):
            return None
        rest = tokens[2:]
        family = rest.pop(0) if rest and rest[0] in FAMILIES else "ip"
        if len(rest) != 2:
            return None
        table, name = (_unquote(token) for token in rest)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", table + name):
            return None  # variables, handles: not worth guessing
        touched.add((family, table, name))
        flushes = flushes or head == "flush"
    return touched, flushes


def _events_update(
    host: Host, deltas: dict, touched: set, previous_sets: dict[str, list]
) -> tuple[dict[str, str], dict[str, list]] | None:
    """New parts/records of the sets the element events moved (and of the touched ones that
    did not move); None when an event names a set the state does not know or one whose
    elements can be updated in place (timeouts)."""
    parts: dict[str, str] = {}
    sets: dict[str, list] = {}
    for family, table, name in set(deltas) | touched:
        key = next(
            (k for k in (f"nft:{family} {table} set {name}", f"nft:{family} {table} map {name}")
             if k in previous_sets),
            None,
        )  # fmt: skip
        if key is None or not table.startswith(host.prefix):
            return None
        declaration_sha, total_hex, count, flags = previous_sets[key]
        if flags & NFT_SET_TIMEOUT:
            return None  # an `add` may refresh an element's timeout: an event, no new element
        dsum, dcount = deltas.get((family, table, name), (0, 0))
        count += dcount
        if count < 0:
            return None
        total = (int(total_hex, 16) + dsum) % MOD256
        parts[key] = set_part_from(declaration_sha, total, count)
        sets[key] = [declaration_sha, f"{total:064x}", count, flags]
    return parts, sets


def incremental_digest(
    host: Host, artefacts: dict, previous: dict | None, events: ElementEvents | None = None
) -> dict | None:
    """The digest after an apply-bundle that only added/deleted elements (or touched no nft):
    the touched sets/maps are moved by the kernel's element events (``events``, opened before
    the load) or, failing that, dumped again (netlink); tc devices and files in the bundle are
    read; every other part is the one recorded after the previous apply. None: read all."""
    started = time.monotonic()
    previous = previous or {}
    previous_parts = previous.get("parts") or {}
    previous_sets = previous.get("sets") or {}
    if not previous_parts or previous.get("source") != "netlink":
        return None
    if not previous.get("total") or host.digest_source == "nft":
        return None
    nft = artefacts.get("nft")
    touched: set[tuple[str, str, str]] = set()
    flushes = False
    if nft is not None:
        if nft["mode"] != "increment":
            return None
        found = increment_sets(nft["text"])
        if found is None:
            return None
        touched, flushes = found
    parts = {k: v for k, v in previous_parts.items() if k.startswith("nft:")}
    sets = dict(previous_sets)
    read: list[str] = []
    via = "none"
    moved = None
    if events is not None and touched and not flushes:
        deltas = events.collect()
        if deltas is not None:
            moved = _events_update(host, deltas, touched, previous_sets)
            via = "events"
    if moved is None and touched:
        via = "dump"
        moved_sets: dict[str, list] = {}
        try:
            fresh = netlink_set_parts(host.prefix, touched, moved_sets)
        except (OSError, NetlinkError, DumpInterrupted, struct.error, ValueError):
            return None
        if fresh is None:
            return None
        moved = fresh, moved_sets
    if moved is not None:
        fresh, moved_sets = moved
        if not set(fresh) <= set(parts):
            return None
        parts.update(fresh)
        sets.update(moved_sets)
        read += fresh
    nft_seconds = time.monotonic() - started
    tc_touched = tc_devices(artefacts["tc"]["text"]) if "tc" in artefacts else set()
    for dev in sorted(tc_devices(host.read_tc_current())):
        key = f"tc:{dev}"
        if dev in tc_touched or key not in previous_parts:
            parts[key] = tc_part(dev)
            read.append(key)
        else:
            parts[key] = previous_parts[key]
    for name, art in sorted(host.artefacts.items()):
        key = f"file:{name}"
        if name in artefacts or key not in previous_parts:
            parts[key] = file_part(art)
            read.append(key)
        else:
            parts[key] = previous_parts[key]
    return {
        "total": digest_total(parts),
        "parts": dict(sorted(parts.items())),
        "source": "netlink",
        "mode": "incremental",
        "read": sorted(read),
        "via": via,
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "_sets": sets,
    }


def open_element_events(host: Host, artefacts: dict, previous: dict | None):
    """The element-event listener for an element-only nft increment whose previous digest
    has set records (None otherwise, or when the socket cannot be had)."""
    nft = artefacts.get("nft")
    if nft is None or nft["mode"] != "increment" or host.digest_source == "nft":
        return None
    if not (previous or {}).get("sets") or (previous or {}).get("source") != "netlink":
        return None
    found = increment_sets(nft["text"])
    if found is None or found[1] or not found[0]:
        return None
    try:
        return ElementEvents()
    except OSError:
        return None


def digest_or_error(host: Host) -> dict:
    try:
        return compute_digest(host)
    except HelperError as exc:
        return {"total": None, "parts": {}, "error": exc.message, "detail": exc.detail}


# --------------------------------------------------------------------------------------------
# The rollback point of apply-bundle: nft + tc + declared files + state, one directory
# --------------------------------------------------------------------------------------------
#
# state_dir/rollback.d is a symlink to state_dir/rp-<token>/ (swapped atomically with rename):
#   meta.json   {"format": 1, "created_at", "tc": {"current": bool, "devices": [...],
#                "canon": {dev: text}}, "files": {name: {"present": bool}}, "state": {...}}
#   nft.nft     the portal tables (`nft -s list table ...` of each)
#   tc.current  the tc batch that built the shaping then (absent: no portal shaping)
#   files/NAME  each declared file's bytes (absent when the file was absent)


def write_bytes_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.portal-fw-{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def capture_rollback_point(
    host: Host, devices: Iterable[str], *, nft_text: str | None = None, state: dict | None = None
) -> dict:
    """Save the current state of everything the helper manages as the rollback point."""
    started = time.monotonic()
    work = host.state_dir / f"rp-{secrets.token_hex(8)}"
    work.mkdir(mode=0o700)
    nft_started = time.monotonic()
    if nft_text is None and host.nft_current_valid():
        # The text that built the portal tables (last replace + the increments after it):
        # a file instead of reading back every element (38 s for 800k elements). A hard link:
        # nft.current is only ever replaced (write, rename), never changed in place.
        link_or_copy(host.nft_current, work / "nft.nft")
        nft_source = "nft.current"
    else:
        (work / "nft.nft").write_text(
            nft_text if nft_text is not None else host.dump_portal_tables(), encoding="utf-8"
        )
        nft_source = "dump" if nft_text is None else "rollback.nft"
    nft_seconds = time.monotonic() - nft_started
    tc_present = host.tc_current.exists()
    if tc_present:  # replaced by rename only, like nft.current
        link_or_copy(host.tc_current, work / "tc.current")
    # The canonical text of the devices this bundle shapes (a later apply on the same point
    # adds its own: extend_rollback_devices). A device no apply touched keeps its shaping; a
    # restore reads its text right before it replays it, and verifies against that.
    touched = sorted(set(devices))
    files: dict[str, dict] = {}
    (work / "files").mkdir()
    for name, art in host.artefacts.items():
        try:
            (work / "files" / name).write_bytes(art.path.read_bytes())
            files[name] = {"present": True}
        except FileNotFoundError:
            files[name] = {"present": False}
    meta = {
        "format": 1,
        "created_at": now_iso(),
        "nft_source": nft_source,
        "tc": {
            "current": tc_present,
            "devices": touched,
            "canon": {dev: tc_canon(dev) for dev in touched},
        },
        "files": files,
        "state": state if state is not None else (host.read_json(host.state_file) or {}),
    }
    (work / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    for path in [*work.rglob("*"), work]:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    link = host.state_dir / "rollback.d.new"
    link.unlink(missing_ok=True)
    os.symlink(work.name, link)
    os.replace(link, host.rollback_dir)  # the atomic switch
    drop_stale_rollback_dirs(host)
    host.rollback_nft.unlink(missing_ok=True)  # an old-style point is superseded
    host.rollback_json.unlink(missing_ok=True)
    return {
        "seconds": round(time.monotonic() - started, 3),
        "nft_seconds": round(nft_seconds, 3),
        "nft_source": nft_source,
    }


def link_or_copy(source: Path, target: Path) -> None:
    """`target` holds `source`'s bytes: a hard link where the file system allows one."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def drop_stale_rollback_dirs(host: Host) -> None:
    keep = os.readlink(host.rollback_dir) if host.rollback_dir.is_symlink() else None
    for path in host.state_dir.glob("rp-*"):
        if path.name != keep:
            remove_tree(path)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    for child in path.iterdir():
        remove_tree(child)
    path.rmdir()


def extend_rollback_devices(host: Host, devices: Iterable[str]) -> None:
    """A re-armed apply may shape devices the rollback point does not know yet. Those were not
    touched since the point was taken (every pending batch's devices were added when it was
    applied), so their canonical text now is the one to restore."""
    meta_file = host.rollback_dir / "meta.json"
    meta = json.loads(meta_file.read_text())
    new = sorted(set(devices) - set(meta["tc"]["devices"]))
    if not new:
        return
    meta["tc"]["devices"] = sorted([*meta["tc"]["devices"], *new])
    meta["tc"]["canon"].update({dev: tc_canon(dev) for dev in new})
    host.write_json(meta_file, meta)


def restore_rollback_point(host: Host, reason: str, extra_devices: Iterable[str] = ()) -> dict:
    """Put back tc, nft and the declared files of the rollback point, then verify tc.

    Every part is attempted even when one fails; a failure raises afterwards (exit 1) with
    what went wrong. The point is consumed on success."""
    point = host.rollback_dir
    meta = json.loads((point / "meta.json").read_text())
    errors: list[str] = []
    saved_tc = (point / "tc.current").read_text() if meta["tc"]["current"] else None
    devices = sorted(
        set(meta["tc"]["devices"])
        | tc_devices(host.read_tc_current())
        | tc_devices(saved_tc)
        | set(extra_devices)
    )
    canon = dict(meta["tc"]["canon"])
    for dev in devices:  # untouched since the point: what runs now is what it held then
        if dev not in canon and dev not in set(extra_devices):
            canon[dev] = tc_canon(dev)
    for dev in devices:  # no root qdisc already: tc answers an error, nothing to do
        run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)
    if saved_tc is not None:
        result = run(["tc", "-batch", "-"], stdin=saved_tc)
        if result.returncode != 0:
            errors.append(f"tc: {(result.stderr or result.stdout).strip()}")
        host.write_file(host.tc_current, saved_tc)
    else:
        host.tc_current.unlink(missing_ok=True)
    try:
        host.restore(point / "nft.nft")
        host.set_nft_current(point / "nft.nft")  # a dump is a complete text as well
    except HelperError as exc:
        errors.append(f"nft: {exc.detail or exc.message}")
        host.set_nft_current(None)
    for name, info in sorted(meta["files"].items()):
        art = host.artefacts.get(name)
        if art is None:
            errors.append(f"file {name}: no longer declared in --artefacts, not restored")
            continue
        try:
            if info["present"]:
                write_bytes_atomic(art.path, (point / "files" / name).read_bytes(), art.mode)
            else:
                art.path.unlink(missing_ok=True)
        except OSError as exc:
            errors.append(f"file {name}: {exc}")
            continue
        if art.reload and info["present"]:  # a file that was absent is removed, not reloaded
            result = run(art.argv(art.reload, art.path), timeout=120)
            if result.returncode != 0:
                errors.append(
                    f"file {name}: reload failed: {(result.stderr or result.stdout).strip()}"
                )
    mismatches = {
        dev: {"expected": expected, "actual": actual}
        for dev, expected in canon.items()
        if (actual := tc_canon(dev)) != expected
    }
    state = {
        **meta.get("state", {}),
        "last_event": {"event": "rolled-back", "reason": reason, "at": now_iso()},
    }
    host.write_json(host.state_file, state)
    event = {"event": "rolled-back", "reason": reason, "to": state.get("version"),
             "tc_verified": not mismatches, "errors": errors}  # fmt: skip
    if mismatches:
        event["tc_mismatch"] = mismatches
    host.log(event)
    if errors:
        error = HelperError(
            EXIT_FAILED, "failed", "restoring the rollback point failed in part", "\n".join(errors)
        )
        error.extra = {"tc_mismatch": sorted(mismatches)}
        raise error
    host.rollback_dir.unlink()
    drop_stale_rollback_dirs(host)
    return {**state, "_restore": {"tc_verified": not mismatches, "tc_mismatch": mismatches}}


def check_bundle(host: Host, artefacts: dict) -> set[str]:
    """Step 1 of apply-bundle: check every artefact; nothing on the host changes. Returns the tc
    devices the bundle changes (names, or drops by replacing the batch)."""
    devices: set[str] = set()
    if "tc" in artefacts:
        devices = tc_static_check(artefacts["tc"]["text"])
        if artefacts["tc"]["mode"] == "replace":  # also drops the shaping of devices it omits
            devices |= tc_devices(host.read_tc_current())
    if "nft" in artefacts:
        nft = artefacts["nft"]
        check_scope(nft["text"], host.prefix)
        host.write_file(host.upload_nft, nft["text"])
        tx = host.transaction(host.upload_nft, replace=nft["mode"] == "replace")
        result = host.nft_file(tx, check_only=True)
        if result.returncode != 0:
            error = HelperError(
                EXIT_FAILED, "failed", "nft rejected the rule set", result.stderr.strip()
            )
            error.extra = {"artefact": "nft"}
            raise error
    for name, art in sorted(artefacts.items()):
        if name in RESERVED_ARTEFACTS:
            continue
        spec = host.artefacts[name]
        if not spec.path.parent.is_dir():
            error = HelperError(EXIT_FAILED, "failed", f"{name}: {spec.path.parent} is missing")
            error.extra = {"artefact": name}
            raise error
        tmp = spec.path.with_name(f".{spec.path.name}.portal-fw-check-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, spec.mode)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(art["text"])
            result = run(spec.argv(spec.check, tmp), timeout=120)
        finally:
            tmp.unlink(missing_ok=True)
        if result.returncode != 0:
            error = HelperError(
                EXIT_FAILED,
                "failed",
                f"the check of {name} failed (exit {result.returncode})",
                (result.stderr + result.stdout).strip()[-4000:],
            )
            error.extra = {"artefact": name}
            raise error
    return devices


def apply_artefacts(host: Host, artefacts: dict) -> None:
    """Step 4 of apply-bundle: tc, then nft, then files. Raises at the first failure, with
    ``extra["artefact"]`` naming it (the caller restores the rollback point)."""

    def failed(name: str, message: str, detail: str) -> HelperError:
        error = HelperError(EXIT_FAILED, "failed", message, detail.strip()[-4000:])
        error.extra = {"artefact": name}
        return error

    if "tc" in artefacts:
        tc = artefacts["tc"]
        current = host.read_tc_current()
        if tc["mode"] == "replace":
            for dev in sorted(tc_devices(current) - tc_devices(tc["text"])):
                run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=60)  # shaping dropped
            new_current = tc["text"]
        else:
            new_current = (current or "") + tc["text"]
        if tc["text"].strip():
            result = run(["tc", "-batch", "-"], stdin=tc["text"])
            if result.returncode != 0:
                raise failed("tc", "tc rejected the batch half way", result.stderr or result.stdout)
        if new_current.strip():
            host.write_file(host.tc_current, new_current)
        else:
            host.tc_current.unlink(missing_ok=True)
    if "nft" in artefacts:
        nft = artefacts["nft"]
        host.write_file(host.upload_nft, nft["text"])
        tx = host.transaction(host.upload_nft, replace=nft["mode"] == "replace")
        result = host.nft_file(tx, check_only=False)
        if result.returncode != 0:
            raise failed("nft", "nft rejected the rule set at apply", result.stderr)
        if nft["mode"] == "replace":
            host.set_nft_current(host.upload_nft)
        elif host.nft_current_valid():
            host.set_nft_current(host.nft_current, append=nft["text"])
        else:
            host.set_nft_current(None)  # unknown base: the next rollback point is a dump
    for name, art in sorted(artefacts.items()):
        if name in RESERVED_ARTEFACTS:
            continue
        spec = host.artefacts[name]
        try:
            write_bytes_atomic(spec.path, art["text"].encode("utf-8"), spec.mode)
        except OSError as exc:
            raise failed(name, f"writing {spec.path} failed", str(exc)) from exc
        if spec.reload:
            result = run(spec.argv(spec.reload, spec.path), timeout=120)
            if result.returncode != 0:
                raise failed(
                    name, f"the reload of {name} failed (exit {result.returncode})",
                    result.stderr + result.stdout,
                )  # fmt: skip


def verb_apply_bundle(host: Host, opts, limit: int) -> dict:
    """Check every artefact, arm one rollback point and the timer, apply tc -> nft -> files,
    restore everything at once if a step fails, answer the content digest."""
    try:
        bundle = parse_bundle(read_stdin(limit), host.artefacts)
    except HelperError as exc:
        raise _check_phase(exc) from None
    artefacts = bundle["artefacts"]
    version = bundle["version"]
    modes = {name: art["mode"] for name, art in sorted(artefacts.items())}
    ha = None
    if (
        opts.health_sample_ms is not None
        and ("conntrackd" in host.artefacts or "keepalived" in host.artefacts)
        and not set(artefacts) - RESERVED_ARTEFACTS
    ):
        # No configuration file changes: the pair's daemons are not touched by this apply, so
        # their status is read alongside it (another interpreter) instead of after it.
        ha = ha_status_start(host)
    with host.locked():
        started = time.monotonic()
        try:
            devices = check_bundle(host, artefacts)
        except HelperError as exc:
            host.log({"event": "bundle-refused-by-check", "version": version,
                      "artefact": exc.extra.get("artefact"), "message": exc.message})  # fmt: skip
            raise _check_phase(exc) from None
        check_seconds = round(time.monotonic() - started, 3)

        started = time.monotonic()
        previous_state = host.read_json(host.state_file) or {}
        old_pending = host.read_json(host.pending_file)
        if old_pending:
            # Still unconfirmed: keep the rollback point of the last confirmed state.
            host.kill_timer(old_pending)
            if host.rollback_dir.exists():
                extend_rollback_devices(host, devices)
            elif host.rollback_nft.exists():  # armed by the old `apply`: make it a full point
                capture_rollback_point(
                    host,
                    devices,
                    nft_text=host.rollback_nft.read_text(encoding="utf-8"),
                    state=host.read_json(host.rollback_json) or {},
                )
            else:
                capture_rollback_point(host, devices)
            point = {"seconds": round(time.monotonic() - started, 3), "kept": True}
        else:
            point = {**capture_rollback_point(host, devices), "kept": False}
        token = secrets.token_hex(16)
        deadline = time.time() + opts.confirm_within
        pending = {
            "token": token,
            "armed_at": now_iso(),
            "deadline": deadline,
            "confirm_within": opts.confirm_within,
            "sha256": version,
            "version": version,
            "bundle": True,
        }
        host.write_json(host.pending_file, pending)
        pending["timer_pid"] = host.arm_timer(token)
        host.write_json(host.pending_file, pending)

        events = open_element_events(host, artefacts, previous_state.get("digest"))
        started = time.monotonic()
        try:
            apply_artefacts(host, artefacts)
        except HelperError as exc:
            if events is not None:
                events.close()
            host.kill_timer(pending)
            exc.phase = "apply"
            failed_artefact = exc.extra.get("artefact")
            try:
                restored = restore_rollback_point(
                    host, f"apply of {failed_artefact} failed", extra_devices=devices
                )
                exc.extra.update(
                    rolled_back=True,
                    restored_version=restored.get("version"),
                    tc_verified=restored["_restore"]["tc_verified"],
                    tc_mismatch=sorted(restored["_restore"]["tc_mismatch"]),
                )
            except HelperError as restore_error:
                exc.extra.update(
                    rolled_back=False,
                    restore_error=restore_error.message,
                    restore_detail=restore_error.detail,
                )
            host.pending_file.unlink(missing_ok=True)
            host.log({"event": "bundle-apply-failed", "version": version,
                      "artefact": failed_artefact, "detail": exc.detail, **exc.extra})  # fmt: skip
            raise
        apply_seconds = round(time.monotonic() - started, 3)
        try:
            digest = incremental_digest(host, artefacts, previous_state.get("digest"), events)
        finally:
            if events is not None:
                events.close()
        if digest is None:
            digest = digest_or_error(host)
        state = {
            "version": version,
            "bundle": True,
            "modes": modes,
            "applied_at": now_iso(),
            "confirmed": False,
            "digest": recorded_digest(digest),
        }
        host.write_json(host.state_file, state)
        health = (
            collect_health(host, opts.health_sample_ms, digest=digest, ha=ha)
            if opts.health_sample_ms is not None
            else None
        )
        # The confirm window counts from this answer, not from the arming: a full bundle of a
        # large site may take longer to apply and read back than the window itself, and the
        # portal can confirm only once it has the answer. (The timer re-reads the deadline.)
        deadline = time.time() + opts.confirm_within
        pending["deadline"] = deadline
        host.write_json(host.pending_file, pending)
    host.log({"event": "bundle-applied", "version": version, "modes": modes,
              "digest": digest.get("total"), "s": apply_seconds})  # fmt: skip
    answer = {
        "version": version,
        "modes": modes,
        "digest": public_digest(digest),
        "check_seconds": check_seconds,
        "rollback_point": point,
        "apply_seconds": apply_seconds,
        "confirm_deadline": dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat(),
        "confirm_within": opts.confirm_within,
    }
    if health is not None:
        answer["health"] = health
    return answer


def verb_digest(host: Host, opts, limit: int) -> dict:
    digest = public_digest(compute_digest(host))
    state = host.read_json(host.state_file) or {}
    recorded = (state.get("digest") or {}).get("parts") or {}
    answer = {"version": state.get("version"), "digest": digest}
    if recorded:
        keys = set(recorded) | set(digest["parts"])
        answer["differs_from_applied"] = sorted(
            k for k in keys if recorded.get(k) != digest["parts"].get(k)
        )
    return answer


KEA_ARTEFACT = "kea-dhcp4"


def verb_dhcp_leases(host: Host, opts, limit: int) -> dict:
    """The leases of this host's Kea (the declared kea-dhcp4 artefact names its socket)."""
    spec = host.artefacts.get(KEA_ARTEFACT)
    if spec is None:
        raise refused(f"this host declares no {KEA_ARTEFACT} artefact (--artefacts)")
    if not spec.path.exists():
        raise HelperError(EXIT_FAILED, "failed", f"{spec.path} is missing: no DHCP pushed yet")
    kea_ctl = HERE / "kea-ctl"
    result = run([str(kea_ctl), "leases", str(spec.path)], timeout=120)
    if result.returncode != 0:
        raise HelperError(EXIT_FAILED, "failed", "Kea did not list its leases", result.stderr)
    try:
        leases = json.loads(result.stdout)["leases"]
    except (ValueError, KeyError) as exc:
        raise HelperError(EXIT_FAILED, "failed", f"kea-ctl answered no leases: {exc}") from exc
    return {"leases": leases, "now": time.time()}


def verb_help(host: Host, opts, limit: int) -> dict:
    return {"verbs": sorted(VERBS), "usage": __doc__.split("\n\n")[2]}


VERBS: dict[str, Callable[[Host, argparse.Namespace, int], dict]] = {
    "check": verb_check,
    "apply": verb_apply,
    "confirm": verb_confirm,
    "rollback": verb_rollback,
    "version": verb_version,
    "health": verb_health,
    "tc-apply": verb_tc_apply,
    "apply-bundle": verb_apply_bundle,
    "digest": verb_digest,
    "dhcp-leases": verb_dhcp_leases,
    "ha-resync": verb_resync,
    "traffic": verb_traffic,
    "help": verb_help,
}


def parse_command(command: str | None) -> tuple[str, list[str]]:
    if command is None or not command.strip():
        raise refused("no command given; this key may only run: " + ", ".join(sorted(VERBS)))
    if len(command) > MAX_COMMAND_CHARS:
        raise refused("command too long")
    if not all(32 <= ord(ch) < 127 for ch in command):
        raise refused("command contains control or non-ASCII characters")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise refused(f"cannot parse command: {exc}") from exc
    if not words or words[0] not in VERBS:
        shown = words[0] if words else command
        raise refused(
            f"command {shown!r} is not allowed; this key may only run: " + ", ".join(sorted(VERBS))
        )
    return words[0], words[1:]


# --------------------------------------------------------------------------------------------
# The rollback timer (a detached copy of this program, started by apply)
# --------------------------------------------------------------------------------------------


def rollback_timer(host: Host, token: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        pending = host.read_json(host.pending_file)
        if not pending or pending.get("token") != token:
            return 0  # confirmed, rolled back or superseded
        left = pending["deadline"] - time.time()
        if left > 0:
            time.sleep(min(left, 0.5))
            continue
        with host.locked(timeout=600):
            pending = host.read_json(host.pending_file)
            if not pending or pending.get("token") != token:
                return 0
            if pending["deadline"] > time.time():
                # The apply that held the lock moved the deadline (it counts from its answer).
                continue
            try:
                host.rollback_now(f"not confirmed within {pending.get('confirm_within')}s")
            except HelperError as exc:
                host.log({"event": "timer-rollback-failed", "message": exc.message,
                          "detail": exc.detail})  # fmt: skip
                return 1
            finally:
                host.pending_file.unlink(missing_ok=True)
        return 0


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="portal-fw", description="see the module docstring")
    top.add_argument("--state-dir", required=True, type=Path)
    top.add_argument("--host-name", default=os.uname().nodename)
    top.add_argument("--table-prefix", default="portal_")
    top.add_argument("--meta-table", default="inet portal_meta")
    top.add_argument("--version-set", default="inet portal_fw version")
    top.add_argument("--max-input-bytes", type=int, default=DEFAULT_MAX_INPUT)
    top.add_argument("--artefacts", type=Path, help="JSON: the declared file artefacts")
    top.add_argument("--ha-run-dir", type=Path, default=Path("/run/portal-ha"),
                     help="where portal-ha keeps the pair's VRRP states (the host's HA state "
                          "directory in the portal)")  # fmt: skip
    top.add_argument("--digest-source", choices=DIGEST_SOURCES, default="auto",
                     help="netlink (auto: falling back to nft -j) or always nft -j")  # fmt: skip
    top.add_argument("--internal-rollback-timer", metavar="TOKEN", help=argparse.SUPPRESS)
    top.add_argument("local_command", nargs=argparse.REMAINDER, help="only without SSH")
    cfg = top.parse_args(argv)
    os.environ["PATH"] = SAFE_PATH
    os.umask(0o077)
    cfg.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if len(cfg.meta_table.split()) != 2:
        top.error("--meta-table: 'FAMILY NAME'")
    if len(cfg.version_set.split()) != 3:
        top.error("--version-set: 'FAMILY TABLE SET'")
    host = Host(
        cfg.state_dir.resolve(),
        cfg.host_name,
        cfg.table_prefix,
        cfg.meta_table,
        cfg.version_set,
        cfg.artefacts.resolve() if cfg.artefacts else None,
    )
    host.digest_source = cfg.digest_source
    host.ha_run_dir = cfg.ha_run_dir

    if cfg.internal_rollback_timer:
        if "SSH_ORIGINAL_COMMAND" in os.environ:
            return EXIT_REFUSED
        try:
            host.artefacts = load_artefacts(host.artefacts_file)
        except HelperError as exc:  # restore nft and tc anyway; files are reported as errors
            host.log({"event": "timer-artefacts-unreadable", "message": exc.message})
        return rollback_timer(host, cfg.internal_rollback_timer)

    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if command is None and cfg.local_command and "SSH_CONNECTION" not in os.environ:
        command = shlex.join(cfg.local_command)  # local use by root on the host itself
    verb = "?"
    try:
        verb, args = parse_command(command)
        opts = parse_verb_args(verb, args)
        host.artefacts = load_artefacts(host.artefacts_file)
        answer = VERBS[verb](host, opts, cfg.max_input_bytes)
    except HelperError as exc:
        out = {"ok": False, "verb": verb, "host": host.name, "error": exc.kind,
               "message": exc.message}  # fmt: skip
        if exc.detail:
            out["detail"] = exc.detail
        if exc.phase:
            out["phase"] = exc.phase
        out.update(exc.extra)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stderr.write(f"portal-fw: {exc.message}\n" + (f"{exc.detail}\n" if exc.detail else ""))
        if exc.kind == "refused":
            host.log({"event": "refused", "command": (command or "")[:200],
                      "message": exc.message})  # fmt: skip
        return exc.code
    sys.stdout.write(json.dumps({"ok": True, "verb": verb, "host": host.name, **answer}) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
