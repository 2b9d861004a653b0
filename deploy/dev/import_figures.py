"""The figures of the portal's import structure (docs/architecture.md, "Measured").

    .venv/bin/python deploy/dev/import_figures.py            # the figures
    .venv/bin/python deploy/dev/import_figures.py --details  # and what each figure counts

Read from the source with the standard library's `ast` alone: nothing of the project is
imported or run, so it measures any checkout (`--root DIR`, default: this repository).

What is read: every .py file under apps/, portal/ and workers/, migrations left out. An import
inside `if TYPE_CHECKING:` is left out (it never runs). An import inside a function body is a
function-level import; every other import (module body, class body, `try`, `if`) runs when
the module is imported and is a module-level import.

A package is one unit of the layers: `apps.<name>` for each app (and for apps/infra),
`workers.ruleset` (the compiler), `workers` (the Celery task modules) and `portal` (settings
and the URL root).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SCOPE = ("apps", "portal", "workers")
LONG_FILE = 800
# The ground floor: a task may lean on it beside its own app and still be "in one app".
GROUND = ("apps.infra", "apps.core")


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported project module, dotted
    line: int
    function_level: bool


@dataclass(slots=True)
class Tree:
    root: Path
    modules: dict[str, Path] = field(default_factory=dict)  # dotted name -> file
    imports: list[Import] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)

    def resolve(self, name: str) -> str | None:
        """The project module `name` names, or its nearest enclosing project module."""
        while name:
            if name in self.modules:
                return name
            name = name.rpartition(".")[0]
        return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """The unit of the layers that `module` belongs to."""
    parts = module.split(".")
    if parts[0] == "apps" and len(parts) > 1:
        return ".".join(parts[:2])
    if parts[:2] == ["workers", "ruleset"]:
        return "workers.ruleset"
    return parts[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, tree: Tree, module: str, is_package: bool) -> None:
        self.tree, self.module, self.is_package = tree, module, is_package
        self.depth = 0  # function nesting

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _add(self, name: str, line: int) -> None:
        target = self.tree.resolve(name)
        if target is not None and target != self.module:
            self.tree.imports.append(Import(self.module, target, line, self.depth > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base.pop()
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join([*base, node.module] if node.module else base)
        else:
            prefix = node.module or ""
        targets = {self.tree.resolve(f"{prefix}.{alias.name}") for alias in node.names}
        # `from pkg import module` imports that module; `from module import name` the module.
        for name in sorted({t if t and t != self.module else prefix for t in targets}):
            self._add(name, node.lineno)


def read_tree(root: Path) -> Tree:
    tree = Tree(root)
    files = [
        path
        for top in SCOPE
        for path in sorted((root / top).rglob("*.py"))
        if "migrations" not in path.relative_to(root).parts
    ]
    for path in files:
        tree.modules[module_name(root, path)] = path
    for path in files:
        text = path.read_text(encoding="utf-8")
        module = module_name(root, path)
        tree.lines[module] = len(text.splitlines())
        _Collector(tree, module, path.name == "__init__.py").visit(ast.parse(text, str(path)))
    return tree


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def package_graph(tree: Tree, *, module_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in tree.imports:
        if module_level_only and imp.function_level:
            continue
        a, b = package_of(imp.source), package_of(imp.target)
        if a != b:
            graph[a].add(b)
    return graph


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


def _str_arg(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _names(module_tree: ast.Module, tree: Tree, module: str) -> dict[str, str]:
    """Names bound by the module's imports -> the project module (or object's module) named."""
    names: dict[str, str] = {}
    for node in module_tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = tree.resolve(full) or full
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = module.split(".")[: -node.level] + ([node.module] if node.module else [])
            for alias in node.names:
                full = ".".join([*base, alias.name])
                names[alias.asname or alias.name] = tree.resolve(full) or full
    return names


def url_routes(tree: Tree) -> list[tuple[str, str, str]]:
    """(route, module defining it, module of its view) for every route under portal.urls."""
    routes: list[tuple[str, str, str]] = []

    def walk(module: str, prefix: str) -> None:
        path = tree.modules.get(module)
        if path is None:
            return
        parsed = ast.parse(path.read_text(encoding="utf-8"))
        names = _names(parsed, tree, module)
        for node in ast.walk(parsed):
            if not (
                isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"path", "re_path"}
            ):
                continue
            route = _str_arg(node) or ""
            if len(node.args) < 2:
                continue
            view = node.args[1]
            if isinstance(view, ast.Call) and getattr(view.func, "id", "") == "include":
                included = _str_arg(view)
                if included:
                    walk(included, prefix + route)
                continue
            root = view
            while isinstance(root, ast.Call | ast.Attribute):
                root = root.func if isinstance(root, ast.Call) else root.value
            view_module = names.get(getattr(root, "id", ""), module)
            if tree.resolve(view_module) is None and view_module.partition(".")[0] not in SCOPE:
                continue  # Django's or a library's view (admin, the schema)
            routes.append((prefix + route, module, tree.resolve(view_module) or view_module))

    walk("portal.urls", "/")
    return routes


def celery_tasks(tree: Tree) -> list[tuple[str, str, list[str]]]:
    """(task function, defining module, apps its code reaches) for every Celery task."""
    reach: dict[str, set[str]] = defaultdict(set)
    for imp in tree.imports:
        reach[imp.source].add(package_of(imp.target))
    found = []
    for module, path in tree.modules.items():
        parsed = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(parsed):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                func = deco.func if isinstance(deco, ast.Call) else deco
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if name in {"shared_task", "task"}:
                    apps = {p for p in reach[module] if p.startswith("apps.") and p not in GROUND}
                    if package_of(module).startswith("apps.") and package_of(module) not in GROUND:
                        apps.add(package_of(module))
                    found.append((node.name, module, sorted(apps)))
    return sorted(found, key=lambda t: (t[1], t[0]))


def figures(root: Path, details: bool) -> None:
    tree = read_tree(root)
    any_graph = package_graph(tree, module_level_only=False)
    module_graph = package_graph(tree, module_level_only=True)
    pairs_any, pairs_module = mutual_pairs(any_graph), mutual_pairs(module_graph)
    package_circles = strongly_connected(module_graph)
    file_graph: dict[str, set[str]] = defaultdict(set)
    for imp in tree.imports:
        file_graph[imp.source].add(imp.target)
    file_circles = strongly_connected(file_graph)
    lazy = [imp for imp in tree.imports if imp.function_level]
    lazy_statements = {(imp.source, imp.line) for imp in lazy}
    long_files = sorted((n, m) for m, n in tree.lines.items() if n > LONG_FILE)
    routes = url_routes(tree)
    routes_elsewhere = [r for r in routes if package_of(r[1]) != package_of(r[2])]
    prefixes: dict[str, set[str]] = defaultdict(set)
    for route, _, view in routes:
        first = route.split("/")[1 if not route.startswith("/api/") else 2]
        key = ("/api/" if route.startswith("/api/") else "/") + first
        prefixes[key].add(package_of(view))
    tasks = celery_tasks(tree)
    tasks_spread = [t for t in tasks if len(t[2]) > 1]

    print(f"files read: {len(tree.modules)} under {', '.join(SCOPE)} (migrations left out)")
    print(f"package pairs importing each other, any import: {len(pairs_any)}")
    print(f"package pairs importing each other, module level: {len(pairs_module)}")
    print(
        f"packages in a module-level import circle: {sum(map(len, package_circles))}"
        f" (in {len(package_circles)} circles)"
    )
    print(f"file circles (function-level imports included): {len(file_circles)}")
    print(
        f"function-level imports of project modules: {len(lazy_statements)}"
        f" in {len({imp.source for imp in lazy})} files"
    )
    print(f"product files over {LONG_FILE} lines (migrations aside): {len(long_files)}")
    print(
        f"URL routes defined outside the app of their view: {len(routes_elsewhere)}"
        f" of {len(routes)}"
    )
    print(f"Celery tasks whose code reaches more than one app: {len(tasks_spread)} of {len(tasks)}")
    if not details:
        return
    print("\n# package pairs importing each other (any import; * = also at module level)")
    for a, b in pairs_any:
        print(f"  {a} <-> {b}{' *' if (a, b) in pairs_module else ''}")
    print("\n# module-level package circles")
    for circle in package_circles:
        print("  " + ", ".join(circle))
    print("\n# file circles")
    for circle in file_circles:
        print("  " + ", ".join(circle))
    print("\n# function-level imports of project modules (file:line -> module)")
    for imp in sorted(lazy, key=lambda i: (i.source, i.line)):
        print(f"  {tree.modules[imp.source].relative_to(root)}:{imp.line} -> {imp.target}")
    print("\n# files over the line bound")
    for lines, module in long_files:
        print(f"  {tree.modules[module].relative_to(root)} {lines}")
    print("\n# URL prefixes and the apps whose views serve them")
    for key in sorted(prefixes):
        print(f"  {key:24} {', '.join(sorted(prefixes[key]))}")
    if routes_elsewhere:
        print("\n# URL routes defined outside the app of their view")
        for route, module, view in routes_elsewhere:
            print(f"  {route:48} defined in {module}, view in {view}")
    print("\n# Celery tasks and the apps their code reaches")
    for name, module, apps in tasks:
        print(f"  {module}.{name}: {', '.join(apps) or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--details", action="store_true", help="list what each figure counts")
    args = parser.parse_args()
    figures(args.root.resolve(), args.details)


if __name__ == "__main__":
    main()
