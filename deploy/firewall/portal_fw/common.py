"""What every module of the host agent shares: typed errors, exit codes, running a tool.

Nothing here touches the host's state; `host.Host` does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
from typing import Any

JSON = dict[str, Any]

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TOOL_ENV = {"PATH": SAFE_PATH, "LC_ALL": "C"}
NFT_TIMEOUT = 300.0

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_CONFLICT, EXIT_BUSY = 0, 1, 2, 3, 4
KIND_CODES = {"failed": EXIT_FAILED, "refused": EXIT_REFUSED, "conflict": EXIT_CONFLICT,
              "busy": EXIT_BUSY}  # fmt: skip


class HelperError(Exception):
    """Ends a request with a typed error answer (``kind``: failed, refused, conflict, busy)."""

    def __init__(self, kind: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = KIND_CODES[kind]
        self.message = message
        self.detail = detail
        self.phase: str | None = None  # "check" when it stopped before changing anything
        self.extra: JSON = {}  # more keys for the answer (apply-bundle: artefact, rolled_back)

    def answer(self) -> JSON:
        """The error as the keys of an answer line."""
        out: JSON = {"ok": False, "error": self.kind, "code": self.code, "message": self.message}
        if self.detail:
            out["detail"] = self.detail
        if self.phase:
            out["phase"] = self.phase
        out.update(self.extra)
        return out


def refused(message: str) -> HelperError:
    return HelperError("refused", message)


def failed(message: str, detail: str | None = None, **extra: Any) -> HelperError:
    error = HelperError("failed", message, detail)
    error.extra.update(extra)
    return error


def conflict(message: str) -> HelperError:
    return HelperError("conflict", message)


def at_check(error: HelperError) -> HelperError:
    """Mark an error as raised before anything on the host changed."""
    error.phase = "check"
    return error


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run(
    argv: list[str], *, stdin: str | None = None, timeout: float = NFT_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run a tool with a fixed argv (never a shell), a clean environment and a time limit."""
    try:
        return subprocess.run(  # noqa: S603 - fixed argv, never a shell
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=TOOL_ENV,
            check=False,
        )
    except FileNotFoundError as exc:
        raise failed(f"{argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise failed(f"{argv[0]} timed out after {timeout}s") from exc


def output(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr or result.stdout or "").strip()
