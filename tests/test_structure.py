"""The code's shape, checked: no import cycles between the package's modules, reports that read
results only, modules of a readable size that each say first what they own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "onnx_parity"
MAX_LINES = 420  # "about 400"


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, *, everywhere: bool) -> set[str]:
    """The package's modules `module` imports: at import time only (not inside functions, not
    under TYPE_CHECKING), or `everywhere`."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes: list[ast.AST] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if everywhere:
                    visit(node.body)
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                nodes.append(node)
            elif everywhere:
                nodes.extend(n for n in ast.walk(node)
                             if isinstance(n, ast.Import | ast.ImportFrom))
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for inner in getattr(node, field, []):
                        visit(inner.body if isinstance(inner, ast.ExceptHandler) else [inner])

    visit(tree.body)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # `from pkg import sub` imports the module pkg.sub; `from mod import name`, mod.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def test_no_module_imports_itself_back() -> None:
    graph = {module: _imports(module, everywhere=False) for module in MODULES}
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == 1:
                cycle = [*path[path.index(other):], other]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if other not in state:
                walk(other)
        path.pop()
        state[module] = 2

    for module in MODULES:
        if module not in state:
            walk(module)


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("onnx_parity.report")])
def test_reports_read_results_only(module: str) -> None:
    reached = _imports(module, everywhere=True)
    forbidden = {m for m in reached
                 if m.split(".")[1] in ("doctor", "worker", "modelrun", "localize", "pipeline",
                                        "backends", "export", "followups")}
    assert not forbidden, f"{module} imports {sorted(forbidden)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_is_readable_and_says_what_it_owns(module: str) -> None:
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: {len(text.splitlines())} lines"
    docstring = ast.get_docstring(ast.parse(text))
    if path.name == "__main__.py":
        return
    assert docstring and docstring.splitlines()[0].strip(), f"{module} has no first line"


def test_the_module_map_names_every_module() -> None:
    """docs/development.md's module map is how the next engineer finds where X is decided."""
    text = (PACKAGE.parent.parent / "docs" / "development.md").read_text(encoding="utf-8")
    missing = []
    for path in MODULES.values():
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" and "/" in relative:
            relative = relative.rpartition("/")[0] + "/"
        if f"`{relative}" not in text:
            missing.append(relative)
    assert not missing, f"docs/development.md's module map lacks {missing}"
