"""The package's imports point one way: core, then the host, config and stores, then the typed
API, then the surfaces (chat grammar, CLI, worker, MCP, coding-agent hooks), and nothing imports
in a circle. Read from the source with ``ast``, so an import inside a function or under
``TYPE_CHECKING`` counts like any other: each is a dependency a reader must follow.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import scopemem

PACKAGE_DIR = Path(scopemem.__file__).parent

#: (layer, module-name prefixes), lowest first. A module may import its own layer or below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("scopemem.core",)),
    ("host", ("scopemem.errors", "scopemem.secrets", "scopemem.secret_library",
              "scopemem.languages", "scopemem.options",
              "scopemem.gitremote", "scopemem.tracing",
              "scopemem.config", "scopemem.config_table", "scopemem.installation",
              "scopemem.plugins",
              "scopemem.stores")),
    ("api", ("scopemem.api",)),
    ("surfaces", ("scopemem.chat", "scopemem.cli", "scopemem.worker_aiohttp", "scopemem.mcp",
                  "scopemem.agent_hooks", "scopemem.hub")),
    # What integrators import, and ``python -m scopemem``: above everything.
    ("top", ("scopemem.__init__", "scopemem.__main__")),
)


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1 and parts != ("scopemem", "__init__"):
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(name: str) -> int | None:
    for index, (_layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                return index
    return None


def _target(name: str, known: set[str]) -> str:
    """The project module an import names: ``scopemem`` itself is the package's
    ``__init__``; ``from scopemem.core import scoring`` names the submodule."""
    if name == "scopemem":
        return "scopemem.__init__"
    return name


@functools.cache
def _parsed(source: str) -> ast.Module:
    # Every test here reads the same files (the planted copies too, but for one line each):
    # each text is parsed once a run. The trees are only read.
    return ast.parse(source)


def imports_of(path: Path, name: str, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every project module ``path`` imports, with the line: anywhere in the file."""
    tree = _parsed(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "scopemem" or alias.name.startswith("scopemem."):
                    yield _target(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != "scopemem" and not source.startswith("scopemem."):
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    yield submodule, node.lineno
                else:
                    yield _target(source, known), node.lineno


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, dict[str, int]]:
    """module → {imported module: first line}, for every module of the package."""
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    known = set(files)
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(path, name, known):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def upward_imports(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    problems = []
    for name, edges in graph.items():
        mine = layer_of(name)
        for target, line in edges.items():
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"{name}:{line} imports {target} "
                                f"({LAYERS[mine][0]} → {LAYERS[theirs][0]})")
    return problems


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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
    return found


def test_every_module_belongs_to_a_layer():
    unplaced = sorted(name for name in import_graph() if layer_of(name) is None)
    assert unplaced == [], "give each new module a layer in tests/test_layers.py"


def test_imports_point_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle():
    assert cycles(import_graph()) == []


def test_core_imports_nothing_of_the_project_but_itself():
    graph = import_graph()
    outside = [f"{name} imports {target}" for name, edges in graph.items()
               if name.startswith("scopemem.core") for target in edges
               if not target.startswith("scopemem.core")]
    assert outside == []


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of the package's layout with one planted upward import and one circle."""
    root = tmp_path / "scopemem"
    for path in PACKAGE_DIR.rglob("*.py"):
        target = root / path.relative_to(PACKAGE_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    engine = root / "core" / "engine.py"
    engine.write_text(engine.read_text(encoding="utf-8")
                      + "\nfrom scopemem.api.memory import Memory  # planted\n",
                      encoding="utf-8")
    reflecting = root / "api" / "reflecting.py"
    reflecting.write_text(reflecting.read_text(encoding="utf-8")
                          + "\nfrom scopemem.api import memory  # planted\n", encoding="utf-8")
    return root


def test_the_checks_catch_a_planted_upward_import_and_circle(planted: Path):
    graph = import_graph(planted)
    assert any(problem.startswith("scopemem.core.engine:") and "scopemem.api.memory" in problem
               for problem in upward_imports(graph))
    assert any({"scopemem.api.memory", "scopemem.api.reflecting"} <= set(component)
               for component in cycles(graph))


#: The store backends (package → backend): each is on its own, and none imports another.
#: What they share lives in the neutral modules beside them (``stores.base``,
#: ``stores.shared``, ``stores.dense``, ``stores.postings``, ``stores.porting``,
#: ``stores.counting``) or in ``core``. ``stores.sqlite`` is the SQLite store's registration
#: (the ``sqlite`` entry point), ``stores.sqlite_shared`` the store it builds: one backend.
BACKENDS = {"scopemem.stores.sqlite": "sqlite", "scopemem.stores.sqlite_shared": "sqlite",
            "scopemem.stores.postgres": "postgres", "scopemem.stores.memory": "memory",
            "scopemem.stores.worker": "worker", "scopemem.stores.worker_transport": "worker",
            "scopemem.stores.worker_browse": "worker", "scopemem.stores.worker_calls": "worker",
            "scopemem.stores.memory_browse": "memory", "scopemem.stores.memory_counts": "memory",
            "scopemem.stores.memory_index": "memory", "scopemem.stores.memory_retention": "memory"}


def backend_of(name: str) -> str | None:
    for package, backend in BACKENDS.items():
        if name == package or name.startswith(package + "."):
            return backend
    return None


def cross_backend_imports(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    problems = []
    for name, edges in graph.items():
        mine = backend_of(name)
        for target, line in edges.items():
            theirs = backend_of(target)
            if mine is not None and theirs is not None and theirs != mine:
                problems.append(f"{name}:{line} imports {target}")
    return problems


def test_no_store_backend_imports_another():
    assert cross_backend_imports(import_graph()) == []


#: What the backends share (the statements both SQL stores run among it): none of it may
#: import a backend, or a backend would import another through it.
NEUTRAL = ("scopemem.stores.shared", "scopemem.stores.base", "scopemem.stores.browsing",
           "scopemem.stores.dense", "scopemem.stores.postings", "scopemem.stores.porting",
           "scopemem.stores.counting")


def neutral_imports(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    return [f"{name}:{line} imports {target}" for name, edges in graph.items()
            if any(name == n or name.startswith(n + ".") for n in NEUTRAL)
            for target, line in edges.items() if backend_of(target) is not None]


def test_no_shared_store_module_imports_a_backend():
    assert neutral_imports(import_graph()) == []


def test_the_neutral_check_catches_a_planted_import(planted: Path):
    shared = planted / "stores" / "shared" / "sql.py"
    shared.write_text(shared.read_text(encoding="utf-8")
                      + "\nfrom scopemem.stores.sqlite_shared import dialect  # planted\n",
                      encoding="utf-8")
    assert any(problem.startswith("scopemem.stores.shared.sql:")
               and "scopemem.stores.sqlite_shared" in problem
               for problem in neutral_imports(import_graph(planted)))


def test_the_backend_check_catches_a_planted_import(planted: Path):
    store = planted / "stores" / "memory.py"
    store.write_text(store.read_text(encoding="utf-8")
                     + "\nfrom scopemem.stores.postgres import tokens  # planted\n",
                     encoding="utf-8")
    assert any(problem.startswith("scopemem.stores.memory:")
               and "scopemem.stores.postgres" in problem
               for problem in cross_backend_imports(import_graph(planted)))
