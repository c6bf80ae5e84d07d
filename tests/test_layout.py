"""The import graph holds the layout (read with ast from the source; nothing is imported): the
runtime imports nothing from the control plane, anywhere, and no module-top-level imports form a
cycle (imports inside functions and under TYPE_CHECKING are not run at import, so they do not count)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dd_slurm"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _named(node: ast.stmt) -> set[str]:
    """The modules an import statement names: `from P import M` names P and, when M is a module, P.M."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.module:
        return {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return set()


def top_level_imports(source: str) -> set[str]:
    """What a module imports when it is imported: its body's imports, also inside if/try blocks,
    not inside functions or classes, not under `if TYPE_CHECKING:`."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            found.update(_named(node))
            if isinstance(node, ast.If) and not _is_type_checking(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(block)

    visit(ast.parse(source).body)
    return found


def all_imports(source: str) -> set[str]:
    """Every import of a module, wherever it stands."""
    return {name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt) for name in _named(node)}


def _with_packages(names: set[str], known: set[str]) -> set[str]:
    """The known modules importing `names` runs: importing a.b.c runs a/__init__ and a/b/__init__ first."""
    return {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 2)} & known


def graph(modules: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules (of those given, by name with their source) its import runs."""
    return {name: _with_packages(top_level_imports(source), set(modules)) - {name} for name, source in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each as the path that closes it (depth-first, one per back edge)."""
    found, state = [], {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            walk(start, [start])
    return found


def sources() -> dict[str, str]:
    return {name: path.read_text() for name, path in MODULES.items()}


def test_the_runtime_imports_nothing_from_the_control_plane() -> None:
    """No module under dd_slurm.runtime imports dd_slurm.control, at top level or inside a function."""
    found = {name: sorted(m for m in all_imports(source) if m.startswith("dd_slurm.control"))
             for name, source in sources().items() if name.startswith("dd_slurm.runtime")}
    assert {} == {name: names for name, names in found.items() if names}


def test_no_import_cycle_at_module_top_level() -> None:
    """Importing any dd_slurm module never re-enters one that is still being imported."""
    assert [] == cycles(graph(sources()))


def test_the_cycle_finder_sees_a_cycle_through_a_package_and_ignores_lazy_imports() -> None:
    """The checks themselves: a -> b.c (running b's __init__) -> a is a cycle; an import inside a
    function or under TYPE_CHECKING is no edge."""
    edges = graph({"a": "import b.c\n", "b": "", "b.c": "from a import x\n",
                   "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ndef f():\n    import a\n"})
    assert ([["a", "b.c", "a"]], set()) == (cycles(edges), edges["d"])


TEST_ONLY_FOLDERS = {"slurm", "bench", "faults"}  # real-cluster tests, benchmarks, the fault matrix


def test_the_tests_mirror_the_package() -> None:
    """Every test folder is one of the package's folders (at the same path) or a test-only one,
    and every top-level test file tests a top-level module or the repository itself."""
    tests = ROOT / "tests"
    folders = {p.parent.relative_to(tests) for p in tests.rglob("test_*.py")} - {Path(".")}
    strays = {f for f in folders if f.parts[0] not in TEST_ONLY_FOLDERS and not (PACKAGE / f).is_dir()}
    top = {p.stem.removeprefix("test_") for p in tests.glob("test_*.py")}
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {"cli_inputs", "readme", "layout"}
    assert (set(), set()) == (strays, top - modules)
