"""A worker restart without a gap: the handover supervisor of the firewall worker.

    python -m apps.infra.handover [--pidfile PATH] -- celery -A portal worker -Q firewall ...

runs the worker command as its child and, on SIGHUP (`systemctl reload portal-firewall`, or
`make firewall-reload` beside `make run`), starts a NEW child from the same command (so new
code is imported) while the old one keeps taking tasks. The new child warms up (reads the
database, compiles every host, builds the delta bases, opens the connections) before it takes
a task; when it is warm it says so on a pipe. Only then does the supervisor stop the old child
(SIGTERM: Celery's warm shutdown, it finishes the task it runs and gives back what it fetched),
and once the old child has exited it tells the new one to go: the new child catches up with
what the old one pushed meanwhile (workers/firewall.py) and takes tasks. A change made during
the handover is served by the old worker while it still takes tasks, or waits in the queue for
the new one; never by both (the queue hands a task to one worker; the runs are idempotent and
serialised per site by the site lock anyway).

A crash during the handover: a new child that dies before it is warm leaves the old one
serving (the reload failed; the supervisor logs it); an old child that dies meanwhile leaves
its tasks to the queue (acks_late) and the new one takes them when warm; a supervisor killed
outright closes the pipes, and a child waiting for "go" then goes (it is the only one left).
SIGTERM or SIGINT to the supervisor stops every child (warm shutdown) and exits; when the
serving child exits by itself, the supervisor exits with its code (systemd restarts it).

Standard library only: the supervisor imports neither Django nor Celery (it costs no memory
and no start time of its own). The child side is `handover_ready()` below, called by the worker
once it is warm; without the supervisor's environment it does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_FD = "PORTAL_HANDOVER_READY_FD"  # the child writes "warm\n" here
GO_FD = "PORTAL_HANDOVER_GO_FD"  # ... and then reads "go\n" (or end of file) here
GENERATION = "PORTAL_HANDOVER_GENERATION"
WARM_TIMEOUT = 600.0  # seconds a new child may take to warm up before the reload is given up
STOP_TIMEOUT = 90.0  # seconds an old child may take to finish its task (TimeoutStopSec)


def _say(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(f"[{stamp}] handover: {message}", file=sys.stderr, flush=True)  # noqa: T201


def handover_active() -> bool:
    """This process runs under the handover supervisor."""
    return bool(os.environ.get(READY_FD) and os.environ.get(GO_FD))


def handover_ready(*, timeout: float = WARM_TIMEOUT) -> bool:
    """In the worker: tell the supervisor this process is warm and wait until it may take tasks
    (the old worker has stopped). Returns True when it waited for a supervisor, False without
    one. The supervisor gone (end of file) also means go."""
    ready, go = os.environ.get(READY_FD), os.environ.get(GO_FD)
    if not ready or not go:
        return False
    try:
        os.write(int(ready), b"warm\n")
    except OSError:
        return True  # no supervisor any more: this one is the only worker
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readable, _, _ = select.select([int(go)], [], [], 1.0)
        if readable:
            with contextlib.suppress(OSError):  # "go\n" or b"" (no supervisor): go either way
                os.read(int(go), 16)
            return True
    return True


def _generation_args(command: list[str], generation: int) -> list[str]:
    """The worker command of a later child: no `--purge` (it would drop changes queued during
    the handover) and a node name of its own (name-N@host), so two workers never share one."""
    if generation == 1:
        return list(command)
    out: list[str] = []
    skip = False
    for i, arg in enumerate(command):
        if skip:
            skip = False
            continue
        if arg in ("--purge", "--discard"):
            continue
        if arg in ("-n", "--hostname") and i + 1 < len(command):
            name, at, host = command[i + 1].partition("@")
            out += [arg, f"{name}-{generation}{at}{host}"]
            skip = True
            continue
        if arg.startswith("--hostname="):
            name, at, host = arg.removeprefix("--hostname=").partition("@")
            out.append(f"--hostname={name}-{generation}{at}{host}")
            continue
        out.append(arg)
    return out


class Child:
    """One worker process and its two pipes."""

    def __init__(self, command: list[str], generation: int) -> None:
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        env = dict(os.environ)
        env.update({READY_FD: str(ready_w), GO_FD: str(go_r), GENERATION: str(generation)})
        self.generation = generation
        self.process = subprocess.Popen(  # noqa: S603 (the operator's own command line)
            _generation_args(command, generation), env=env, pass_fds=(ready_w, go_r)
        )
        os.close(ready_w)
        os.close(go_r)
        self.ready_r, self.go_w = ready_r, go_w
        self.warm = False
        self.went = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll_warm(self, timeout: float) -> bool:
        """Read the child's "warm" (True once it said so); False on timeout or its death."""
        if self.warm:
            return True
        readable, _, _ = select.select([self.ready_r], [], [], timeout)
        if readable:
            try:
                data = os.read(self.ready_r, 16)
            except OSError:
                data = b""
            self.warm = data.startswith(b"warm")
        return self.warm

    def go(self) -> None:
        if self.went:
            return
        self.went = True
        with contextlib.suppress(OSError):  # it died meanwhile: the caller sees its exit code
            os.write(self.go_w, b"go\n")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """Warm shutdown (SIGTERM); SIGKILL after `timeout`. Returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _say(f"worker {self.pid} did not stop within {timeout:.0f} s: killed")
                self.process.kill()
                self.process.wait()
        self.close()
        return self.process.returncode

    def close(self) -> None:
        for fd in (self.ready_r, self.go_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.ready_r = self.go_w = -1


class Supervisor:
    """Runs the serving child; SIGHUP hands over to a new one (see the module docstring)."""

    def __init__(self, command: list[str], *, warm_timeout: float = WARM_TIMEOUT,
                 stop_timeout: float = STOP_TIMEOUT) -> None:  # fmt: skip
        self.command = command
        self.warm_timeout, self.stop_timeout = warm_timeout, stop_timeout
        self.generation = 0
        self.reload_asked = False
        self.stop_asked = False

    def spawn(self) -> Child:
        self.generation += 1
        child = Child(self.command, self.generation)
        _say(f"worker {child.pid} (generation {child.generation}) started")
        return child

    def run(self) -> int:
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "reload_asked", True))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(self, "stop_asked", True))
        current = self.spawn()
        while True:
            if self.stop_asked:
                return current.stop(self.stop_timeout)
            if not current.went and current.poll_warm(0):
                current.go()  # the first child, or one whose predecessor died: no one to stop
                _say(f"worker {current.pid} takes tasks")
            if self.reload_asked:
                self.reload_asked = False
                current = self.handover(current)
                continue
            code = current.process.poll()
            if code is not None:
                current.close()
                _say(f"worker {current.pid} exited with {code}")
                return code
            time.sleep(0.2)

    def handover(self, old: Child) -> Child:
        """Start a new child, stop `old` once the new one is warm, then let the new one go.
        Returns the child that serves afterwards."""
        started = time.monotonic()
        new = self.spawn()
        deadline = started + self.warm_timeout
        while not new.poll_warm(0.2):
            if self.stop_asked:
                new.stop(self.stop_timeout)
                return old
            if new.process.poll() is not None or time.monotonic() > deadline:
                new.stop(self.stop_timeout)
                _say(f"reload failed: worker {new.pid} never got warm; {old.pid} keeps serving")
                return old
        warm = time.monotonic() - started
        code = old.stop(self.stop_timeout)
        new.go()
        _say(
            f"worker {new.pid} warm after {warm:.2f} s; worker {old.pid} stopped ({code}); "
            f"worker {new.pid} takes tasks, handover {time.monotonic() - started:.2f} s"
        )
        return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.infra.handover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--pidfile", type=Path, help="write the supervisor's pid here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no worker command after --")
    if args.pidfile:
        args.pidfile.parent.mkdir(parents=True, exist_ok=True)
        args.pidfile.write_text(f"{os.getpid()}\n")
    try:
        return Supervisor(command).run()
    finally:
        if args.pidfile:
            args.pidfile.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
