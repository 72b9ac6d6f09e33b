"""The code's shape, checked: stage folders in the order a case flows, none importing a later
one; no import cycles, at load or inside functions; reports that read results only; a small top
level; modules that each say first what they own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "onnx_parity"
# Modules beside the stage folders: the shared leaves (the values between stages, their words,
# their decorator, errors, wording, escaping, capture) and the entry points.
MAX_TOP_LEVEL = 10
# The stage folders, in the order a case flows through them; each may import only the shared
# leaves at the top level, its own folder and the folders before it.
STAGES = ("spec", "plan", "machine", "prepare", "backends", "compare", "explain", "run",
          "report", "cli")
# Folders of shared leaves: one home for an axis every stage reads (a metric's key, measure
# and words), held to the leaves' rule: they import no stage at all.
SHARED = ("metrics",)


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


@pytest.mark.parametrize("everywhere", [False, True], ids=["at-load", "inside-functions-too"])
def test_no_module_imports_itself_back(everywhere: bool) -> None:
    graph = {module: _imports(module, everywhere=everywhere) for module in MODULES}
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


def _folder(module: str) -> str | None:
    """The stage folder a module is in; None for a shared leaf (a top-level module, or one in
    a SHARED folder)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in SHARED:
        return None
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES) else None


def test_the_package_is_its_stage_folders_and_a_few_shared_leaves() -> None:
    folders = {path.name for path in PACKAGE.iterdir()
               if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == set(STAGES) | set(SHARED)
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_folder_imports_a_later_stage(module: str) -> None:
    """Inside functions and under TYPE_CHECKING too: a later stage's values would have to be
    made before this stage runs. The shared leaves import no stage at all."""
    here = _folder(module)
    later = STAGES[STAGES.index(here) + 1:] if here is not None else STAGES
    if module == "onnx_parity.__main__":
        later = ()  # `python -m onnx_parity` is the command line itself
    reached = sorted(m for m in _imports(module, everywhere=True) if _folder(m) in later)
    assert not reached, f"{module} imports {reached}, a later stage"


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("onnx_parity.report")])
def test_reports_read_results_only(module: str) -> None:
    """Reports read a RunReport; no report runs a model, a session, a worker or an
    explanation."""
    reached = _imports(module, everywhere=True)
    forbidden = {m for m in reached
                 if _folder(m) in ("machine", "prepare", "backends", "explain", "run")}
    assert not forbidden, f"{module} imports {sorted(forbidden)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_says_what_it_owns(module: str) -> None:
    path = MODULES[module]
    # No cap on a module's or a class's length: code made to fit a cap (a concept split in two,
    # mixins) reads worse than code split by job or kept whole.
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
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


def test_the_tests_mirror_the_stages() -> None:
    """A test lives in the folder of the stage it tests; only the house's rules stay on top."""
    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir()
               if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders <= set(STAGES) | set(SHARED), sorted(folders - set(STAGES) - set(SHARED))
    assert [p.name for p in tests.glob("test_*.py")] == ["test_structure.py"]
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test modules share a name"
    reaching = [p.name for p in tests.rglob("test_*.py")
                if "\nfrom conftest import" in p.read_text()]
    assert not reaching, f"import from helpers.py, not conftest: {reaching}"
