#!/usr/bin/python3 -I
"""portal-fw: the only thing the portal's SSH key may run on a firewall host.

Installed as the forced command of the portal's key in authorized_keys, e.g.

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
    health [--sample-ms MS]                   conntrack, softirq per CPU, load, interfaces, version
    tc-apply                                  tc -batch on stdin (qdisc/class/filter lines only)
    help                                      this list

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
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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

    def __init__(self, state_dir: Path, name: str, prefix: str, meta_table: str, version_set: str):
        self.state_dir = state_dir
        self.version_set = tuple(version_set.split())
        self.name = name
        self.prefix = prefix
        self.meta_family, self.meta_name = meta_table.split()
        self.lock_file = state_dir / "lock"
        self.state_file = state_dir / "state.json"
        self.pending_file = state_dir / "pending.json"
        self.rollback_nft = state_dir / "rollback.nft"
        self.rollback_json = state_dir / "rollback.json"
        self.upload_nft = state_dir / "upload.nft"
        self.staged_nft = state_dir / "staged.nft"
        self.tx_nft = state_dir / "transaction.nft"
        self.log_file = state_dir / "log.jsonl"

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

    def write_json(self, path: Path, obj: dict) -> None:
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
        argv = (
            ["nft", "-c", "-f", str(self.tx_nft)] if check_only else ["nft", "-f", str(self.tx_nft)]
        )
        return run(argv)

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
            sys.executable,
            "-I",
            str(Path(__file__).resolve()),
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
    if verb == "health":
        parser.add_argument("--sample-ms", type=int, default=200)
    ns = parser.parse_args(args)
    if verb == "apply":
        if not 1 <= ns.confirm_within <= MAX_CONFIRM_WITHIN:
            raise refused(f"--confirm-within must be 1..{MAX_CONFIRM_WITHIN} seconds")
        if ns.version is not None and not re.fullmatch(r"[A-Za-z0-9._:+/-]{1,128}", ns.version):
            raise refused("--version: 1-128 characters of [A-Za-z0-9._:+/-]")
        if ns.staged is not None and not re.fullmatch(r"[0-9a-f]{64}", ns.staged):
            raise refused("--staged: a sha256 in lowercase hex")
    if verb == "health" and not 0 <= ns.sample_ms <= 2000:
        raise refused("--sample-ms must be 0..2000")
    if verb == "apply" and ns.health_sample_ms is not None and not 0 <= ns.health_sample_ms <= 2000:
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
    return {"version": restored.get("version"), "rolled_back": True, "was_pending": bool(pending)}


def verb_version(host: Host, opts, limit: int) -> dict:
    loaded = host.loaded_version()
    state = host.read_json(host.state_file)
    pending = host.read_json(host.pending_file)
    state_version = (state or {}).get("version")
    version = loaded["version"] or state_version
    return {
        "version": version,
        "source": loaded["source"] or ("state" if state_version else None),
        "loaded": loaded,
        "state": state,
        "pending_confirm": _pending_summary(pending),
        "drift": bool(loaded["version"] and state_version and loaded["version"] != state_version),
    }


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


def read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def verb_health(host: Host, opts, limit: int) -> dict:
    return collect_health(host, opts.sample_ms)


def collect_health(host: Host, sample_ms: int) -> dict:
    """The `health` answer; softirq shares over `sample_ms` (0: no sample, no shares)."""
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
    loaded = host.loaded_version()
    pending = host.read_json(host.pending_file)
    state = host.read_json(host.state_file) or {}
    return {
        "time": now_iso(),
        "uptime_seconds": float(Path("/proc/uptime").read_text().split()[0]),
        "conntrack": {
            "count": count,
            "max": maximum,
            "buckets": read_int("/proc/sys/net/netfilter/nf_conntrack_buckets"),
            "ratio": round(count / maximum, 6) if count is not None and maximum else None,
        },
        "softirq": {
            "sample_ms": sample_ms,
            "per_cpu": per_cpu,
            "max_share": max((c["softirq"] for c in per_cpu), default=0.0),
        },
        "loadavg": [float(x) for x in load[:3]],
        "interfaces": read_interfaces(),
        "version": loaded["version"] or state.get("version"),
        "loaded": loaded,
        "confirmed": state.get("confirmed"),
        "pending_confirm": _pending_summary(pending),
        "collect_seconds": round(time.monotonic() - started, 3),
    }


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
        if left <= 0:
            break
        time.sleep(min(left, 0.5))
    with host.locked(timeout=600):
        pending = host.read_json(host.pending_file)
        if not pending or pending.get("token") != token:
            return 0
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
        cfg.state_dir.resolve(), cfg.host_name, cfg.table_prefix, cfg.meta_table, cfg.version_set
    )

    if cfg.internal_rollback_timer:
        if "SSH_ORIGINAL_COMMAND" in os.environ:
            return EXIT_REFUSED
        return rollback_timer(host, cfg.internal_rollback_timer)

    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if command is None and cfg.local_command and "SSH_CONNECTION" not in os.environ:
        command = shlex.join(cfg.local_command)  # local use by root on the host itself
    verb = "?"
    try:
        verb, args = parse_command(command)
        opts = parse_verb_args(verb, args)
        answer = VERBS[verb](host, opts, cfg.max_input_bytes)
    except HelperError as exc:
        out = {"ok": False, "verb": verb, "host": host.name, "error": exc.kind,
               "message": exc.message}  # fmt: skip
        if exc.detail:
            out["detail"] = exc.detail
        if exc.phase:
            out["phase"] = exc.phase
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
