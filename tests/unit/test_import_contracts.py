"""The import contracts of pyproject.toml ([tool.importlinter]) hold: the apps form the floors of
docs/architecture.md, no app imports the URL root or a task module, the compiler imports nothing
of the portal and its modules import each other without a circle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_import_contracts_are_kept() -> None:
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The check can fail: network imports members, so forbidding that is reported broken."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["apps"]\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "network without members"\ntype = "forbidden"\n'
        'source_modules = ["apps.network"]\nforbidden_modules = ["apps.members"]\n'
    )
    result = _lint_imports("--config", str(config))
    assert result.returncode != 0
    assert "network without members BROKEN" in result.stdout
