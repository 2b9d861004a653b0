"""The host package passes `mypy --strict`, uses nothing but the standard library and its modules
import each other without a circle."""

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


def package_imports(package: Path) -> dict[str, set[str]]:
    """{module: {module of the same package it imports}}, function-level imports included."""
    found: dict[str, set[str]] = {}
    for module in sorted(package.glob("*.py")):
        own = found.setdefault(module.stem, set())
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:  # from .x import y
                    own.add(node.module.split(".")[0])
                else:  # from . import x, y
                    own.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                f"{package.name}."
            ):
                own.add((node.module or "").split(".")[1])
    return {
        name: {d for d in deps if d != name and d != "__init__"} for name, deps in found.items()
    }


def import_circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The circles of an import graph: each strongly connected set of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for dep in sorted(imports.get(name, ())):
            if dep not in index:
                visit(dep)
                low[name] = min(low[name], low[dep])
            elif dep in stack:
                low[name] = min(low[name], index[dep])
        if low[name] == index[name]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == name:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for name in sorted(imports):
        if name not in index:
            visit(name)
    return circles


def test_the_host_packages_modules_import_each_other_without_a_circle() -> None:
    """Each module builds on lower ones (ha on pair, nft on traffic, rollback and deferred on
    host): a module never needs one that needs it, not even from inside a function."""
    assert import_circles(package_imports(FIREWALL / "portal_fw")) == []


def test_a_circle_between_two_modules_is_found(tmp_path: Path) -> None:
    package = tmp_path / "portal_fw"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import x\n")
    (package / "b.py").write_text("def f():\n    from . import a, c\n")
    (package / "c.py").write_text("from portal_fw.common import y\n")
    imports = package_imports(package)
    assert imports["b"] == {"a", "c"}
    assert imports["c"] == {"common"}
    assert import_circles(imports) == [["a", "b"]]


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
