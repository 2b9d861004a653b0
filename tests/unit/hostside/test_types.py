"""The host package passes `mypy --strict` and uses nothing but the standard library."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

FIREWALL = Path(__file__).resolve().parents[3] / "deploy" / "firewall"
MAX_LINES = 400


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_the_host_package_passes_mypy_strict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "-p", "portal_fw"],
        cwd=FIREWALL, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_host_package_imports_only_the_standard_library_and_stays_small() -> None:
    for module in sorted((FIREWALL / "portal_fw").glob("*.py")):
        text = module.read_text()
        assert len(text.splitlines()) <= MAX_LINES, f"{module.name}: split it by concern"
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "portal_fw", (module.name, name)


def test_make_lint_covers_the_entry_points_without_a_py_name() -> None:
    """ruff (make lint: check and format) includes every script without a .py suffix."""
    import shutil

    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists() and shutil.which("ruff") is None:
        pytest.skip("ruff is not installed")
    root = Path(__file__).resolve().parents[3]
    listed = subprocess.run(
        [str(ruff if ruff.exists() else "ruff"), "check", "--show-files", "."],
        cwd=root, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    scripts = ["deploy/firewall/portal-fw", "deploy/firewall/portal-ha", "deploy/firewall/portal-ra",
               "deploy/firewall/kea-ctl", "deploy/probe/portal-probe"]  # fmt: skip
    for script in scripts:
        assert str(root / script) in listed, script
