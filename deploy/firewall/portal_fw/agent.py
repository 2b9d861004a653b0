"""The agent: the forced command's program, one process per SSH connection.

sshd runs the forced command and puts what the client asked for into SSH_ORIGINAL_COMMAND:

* ``agent --protocol N``: the agent. It writes one hello line, then answers one JSON line per
  request line until the connection closes (stdin ends)::

      hello    {"agent": 1, "host": "nat1", "verbs": [...], "probes": {...}, "pid": 123}
      request  {"id": 7, "verb": "apply-bundle", "args": {"confirm_within": 30}, "input": {...}}
      answer   {"id": 7, "ok": true, "verb": "apply-bundle", "host": "nat1", "agent_seconds": 0.012, ...}
      error    {"id": 7, "ok": false, "error": "refused"|"failed"|"conflict"|"busy",
                "code": 2, "message": "...", "detail": "...", "phase": "check", ...}

  A line that does not parse, names an unknown verb or carries bad arguments is answered with
  a refusal and changes nothing; the agent goes on serving. A portal that expects another
  protocol number is refused in the hello ("host runs agent 1, portal expects 2: update the
  host") and the agent exits: nothing is applied.
* ``VERB --option value``: one request in the same verb table, answered the same way, the
  process then exits with the answer's code (operators on the host; one-off SSH commands).

An agent lives as long as its connection, and the portal keeps connections open between
rollouts: after a host upgrade (deploy/install.sh firewall) the running agent would go on with
the code it loaded. It notes its package's files at start; when a `version` request (the
portal's probe before it reuses an agent) finds them changed, it exits without answering, and
the portal starts the installed agent on a new connection (apps/firewall/transport.py treats the
probe's end as a lost agent). Other requests are answered: a session is never cut half way.

Never a shell; nothing but the verb table (verbs.py). Exit codes of the one-shot form: 0 ok,
1 failed, 2 refused, 3 conflict, 4 busy.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import IO, Any

from . import AGENT_PROTOCOL, deferred, probes, rollback
from .bundle import load_artefacts
from .common import EXIT_OK, EXIT_REFUSED, JSON, SAFE_PATH, HelperError, refused
from .digest import DIGEST_SOURCES
from .host import Host
from .verbs import VERBS, args_from_words, validate

MAX_COMMAND_CHARS = 1024
DEFAULT_MAX_INPUT = 256 * 1024 * 1024
EXIT_PROTOCOL = 5
ID_MAX = 64


PACKAGE_DIR = Path(__file__).resolve().parent


def installed_code(directory: Path = PACKAGE_DIR) -> tuple[tuple[str, int, int, int], ...]:
    """The package's files as installed now (name, inode, mtime, size): an upgrade replaces or
    rewrites them."""
    found = []
    for path in sorted(directory.glob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((path.name, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


class Agent:
    """Answers requests for one host; `serve` is the per-connection loop."""

    def __init__(self, host: Host, max_input: int) -> None:
        self.host, self.max_input = host, max_input
        self.code = installed_code()

    def outdated(self, line: bytes) -> bool:
        """Whether LINE is the portal's `version` probe and this agent's files were replaced
        since it started (it then exits unanswered; the portal starts the installed one)."""
        if b'"version"' not in line or installed_code() == self.code:
            return False
        try:
            return bool(json.loads(line).get("verb") == "version")
        except (ValueError, AttributeError):
            return False

    def answer(self, verb: str, args: Any, given_input: Any = None) -> JSON:
        """Run one request; every failure becomes a typed error answer."""
        started = time.monotonic()
        try:
            typed = validate(verb, args)
            if VERBS[verb].takes_input:
                if given_input is None:
                    raise refused(f"{verb}: the request carries no input")
                typed["input"] = given_input
            elif given_input is not None:
                raise refused(f"{verb} takes no input")
            self.host.artefacts = load_artefacts(self.host.artefacts_file)
            out: JSON = {"ok": True, **VERBS[verb].run(self.host, typed)}
        except HelperError as exc:
            out = exc.answer()
            if exc.kind == "refused":
                self.host.log({"event": "refused", "verb": verb[:40], "message": exc.message})
        out.update(verb=verb, host=self.host.name)
        out["agent_seconds"] = round(time.monotonic() - started, 4)
        return out

    def request(self, line: bytes) -> JSON:
        """One request line -> its answer (with the request's id when it had one)."""
        try:
            request = json.loads(line)
        except ValueError as exc:
            return self._refusal(None, f"the request is not JSON ({exc})")
        if not isinstance(request, dict):
            return self._refusal(None, "a request is one JSON object")
        rid = request.get("id")
        if isinstance(rid, bool) or not isinstance(rid, (int, str)) or len(str(rid)) > ID_MAX:
            return self._refusal(None, "the request needs an id (a number or a short string)")
        unknown = sorted(set(request) - {"id", "verb", "args", "input"})
        verb = request.get("verb")
        if unknown:
            return self._refusal(rid, f"unknown request key(s) {', '.join(unknown)}")
        if not isinstance(verb, str) or verb not in VERBS:
            return self._refusal(rid, f"unknown verb {str(verb)[:40]!r}; verbs: {', '.join(VERBS)}")
        return {"id": rid, **self.answer(verb, request.get("args"), request.get("input"))}

    def _refusal(self, rid: Any, message: str) -> JSON:
        self.host.log({"event": "refused", "message": message[:200]})
        return {"id": rid, **refused(message).answer(), "host": self.host.name}

    def serve(self, stdin: IO[bytes], stdout: IO[bytes], expected: int) -> int:
        """The per-connection loop: hello, then one answer per request line until EOF."""
        if expected != AGENT_PROTOCOL:
            message = (
                f"host runs agent {AGENT_PROTOCOL}, portal expects {expected}: update the "
                + ("host" if expected > AGENT_PROTOCOL else "portal")
            )
            write(stdout, {"agent": AGENT_PROTOCOL, "ok": False, "error": "protocol",
                           "message": message, "host": self.host.name})  # fmt: skip
            self.host.log({"event": "protocol-refused", "expected": expected})
            return EXIT_PROTOCOL
        write(stdout, {"agent": AGENT_PROTOCOL, "ok": True, "host": self.host.name,
                       "verbs": sorted(VERBS), "probes": probes.report(), "pid": os.getpid()})  # fmt: skip
        while True:
            line = stdin.readline(self.max_input + 1)
            if not line:
                return EXIT_OK  # the connection closed
            if len(line) > self.max_input and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # drop the rest of that line
                    line = stdin.readline(1 << 20)
                write(stdout, self._refusal(None, f"request larger than {self.max_input} bytes"))
                continue
            if line.strip():
                if self.outdated(line):
                    self.host.log({"event": "agent-replaced", "pid": os.getpid()})
                    return EXIT_OK  # unanswered: the portal starts the installed agent
                write(stdout, self.request(line))
                self.host.run_later()


def write(stdout: IO[bytes], answer: JSON) -> None:
    stdout.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
    stdout.flush()


def parse_command(command: str | None) -> list[str]:
    """SSH_ORIGINAL_COMMAND as words (shlex, no shell); the first is `agent` or a verb."""
    allowed = "agent --protocol N, or one of: " + ", ".join(VERBS)
    if command is None or not command.strip():
        raise refused(f"no command given; this key may only run {allowed}")
    if len(command) > MAX_COMMAND_CHARS:
        raise refused("command too long")
    if not all(32 <= ord(ch) < 127 for ch in command):
        raise refused("command contains control or non-ASCII characters")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise refused(f"cannot parse command: {exc}") from exc
    if not words or (words[0] != "agent" and words[0] not in VERBS):
        shown = words[0] if words else command
        raise refused(f"command {shown!r} is not allowed; this key may only run {allowed}")
    return words


def read_input(limit: int) -> str:
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise refused(f"input larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refused("input is not UTF-8") from exc


def one_shot(agent: Agent, words: list[str]) -> int:
    verb = words[0]
    try:
        args = args_from_words(verb, words[1:])
        given = read_input(agent.max_input) if VERBS[verb].takes_input else None
    except HelperError as exc:
        answer = {**exc.answer(), "verb": verb, "host": agent.host.name}
    else:
        answer = agent.answer(verb, args, given)
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    agent.host.run_later()
    if not answer["ok"]:
        detail = f"{answer['detail']}\n" if answer.get("detail") else ""
        sys.stderr.write(f"portal-fw: {answer['message']}\n{detail}")
        return int(answer["code"])
    return EXIT_OK


def options(argv: list[str] | None) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="portal-fw", description="see portal_fw/agent.py")
    top.add_argument("--state-dir", required=True, type=Path)
    top.add_argument("--host-name", default=os.uname().nodename)
    top.add_argument("--table-prefix", default="portal_")
    top.add_argument("--max-input-bytes", type=int, default=DEFAULT_MAX_INPUT)
    top.add_argument("--artefacts", type=Path, help="JSON: the declared file artefacts")
    top.add_argument("--ha-run-dir", type=Path, default=Path("/run/portal-ha"))
    top.add_argument("--digest-source", choices=DIGEST_SOURCES, default="auto")
    top.add_argument("--run-dir", type=Path, help="what describes the rule set (a tmpfs)")
    # Accepted from forced commands written for the helper before the agent; no effect.
    top.add_argument("--meta-table", help=argparse.SUPPRESS)
    top.add_argument("--version-set", help=argparse.SUPPRESS)
    top.add_argument("--internal-rollback-timer", metavar="TOKEN", help=argparse.SUPPRESS)
    top.add_argument("--internal-deferred", metavar="ARTEFACT", help=argparse.SUPPRESS)
    top.add_argument("local_command", nargs=argparse.REMAINDER, help="only without SSH")
    return top.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    cfg = options(argv)
    os.environ["PATH"] = SAFE_PATH
    os.umask(0o077)
    cfg.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if cfg.run_dir:
        cfg.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    host = Host(
        cfg.state_dir.resolve(),
        cfg.host_name,
        cfg.table_prefix,
        cfg.artefacts.resolve() if cfg.artefacts else None,
        cfg.ha_run_dir,
        cfg.digest_source,
        cfg.run_dir.resolve() if cfg.run_dir else None,
    )
    if cfg.internal_rollback_timer:
        if "SSH_ORIGINAL_COMMAND" in os.environ:
            return EXIT_REFUSED
        try:
            host.artefacts = load_artefacts(host.artefacts_file)
        except HelperError as exc:  # restore nft and tc anyway; files are reported as errors
            host.log({"event": "timer-artefacts-unreadable", "message": exc.message})
        return rollback.timer(host, cfg.internal_rollback_timer)
    if cfg.internal_deferred:  # the Kea path (deferred.py), started by an apply or a restore
        if "SSH_ORIGINAL_COMMAND" in os.environ:
            return EXIT_REFUSED
        try:
            host.artefacts = load_artefacts(host.artefacts_file)
        except HelperError as exc:
            host.log({"event": "deferred-artefacts-unreadable", "message": exc.message})
            return 1
        return deferred.serve(host, cfg.internal_deferred)
    agent = Agent(host, cfg.max_input_bytes)
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if command is None and cfg.local_command and "SSH_CONNECTION" not in os.environ:
        command = shlex.join(cfg.local_command)  # local use by root on the host itself
    try:
        words = parse_command(command)
        if words[0] == "agent":
            if len(words) != 3 or words[1] != "--protocol" or not words[2].isdigit():
                raise refused("usage: agent --protocol N")
            return agent.serve(sys.stdin.buffer, sys.stdout.buffer, int(words[2]))
    except HelperError as exc:
        sys.stdout.write(json.dumps({**exc.answer(), "verb": "?", "host": host.name}) + "\n")
        sys.stderr.write(f"portal-fw: {exc.message}\n")
        host.log({"event": "refused", "command": (command or "")[:200], "message": exc.message})
        return exc.code
    return one_shot(agent, words)
