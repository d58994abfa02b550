"""The layering rule, checked on the import graph of ``operative/``.

The *kernel* is ``operative._core`` plus every module the run needs: each non-feature
module reachable by imports from ``_core``, from ``operative._agent`` (``create_agent``)
and from ``operative._lazy`` (lazy agents). A *feature* is a package or module built on
the kernel: a feature package (``durable``, ``guardrails``, ``multiagent``, ...), or a
feature module inside a package the kernel uses (the SQL backends of ``kvstore``, whose
protocol and ``MemoryStore`` are beneath the kernel). The rule:

(a) no kernel module imports a feature (features attach to a run through the
    extension seam, ``operative._core._extension``, never the other way round);
(b) no import cycle contains both a kernel module and a module outside the kernel.

What counts as an import, read from the source with :mod:`ast`:

- every ``import`` and ``from ... import`` statement, at module level, in a class body,
  in a ``try`` block or inside a function (a function-level import runs when the
  function does: it is a dependency all the same, only a late one);
- ``importlib.import_module("literal")`` calls;
- importing ``p.q.m`` also runs ``p.q/__init__.py``, so each enclosing package below the
  root is an import too (not for a module inside that package: it is already running);
- ``from p import name`` imports the module ``p.name`` when there is one;
- a *lazy export* (PEP 562) is an import in a package's module-level ``__getattr__``: it
  runs when a client first names the attribute, not when the package is imported. So it
  is the client's import, not the package's: ``from p import name`` (or ``*``), and
  ``p.name`` in a module that imports ``p``, import what ``p`` loads for ``name``. The
  package's own ``__getattr__`` import, and the ``if TYPE_CHECKING:`` import declaring
  the same names for type checkers, are kept (``lazy`` names the attributes) but are no
  edge of their own. (A lazy table read by ``importlib.import_module`` with a name that
  is not a literal is not seen, like any such call.)

Imports under ``if TYPE_CHECKING:`` are *not* runtime imports: they never run, cannot make
a cycle and do not make a module part of the kernel. They are kept apart (``runtime`` is
False) and the rule is not applied to them: a kernel annotation may name a type from
elsewhere without depending on it. (At the time of writing the kernel has none into a
feature; ``test_the_kernel_names_no_feature_type`` keeps it so, separately, so a
failure there says which of the two rules broke.)

Model providers are found through the ``operative.models`` entry points by name, at run
time; an entry point is not an import, which is the point.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FEATURES = frozenset(
    {
        "budgets",
        "durable",
        "guardrails",
        "multiagent",
        "sessions",
        "providers",
        "instrumentation",
        "runstore",
        "cli",
        "testing",
        "mcp",
        "temporal",
        "ui",
    }
)
"""Subpackages of ``operative`` built on the kernel (some are still to come)."""

FEATURE_MODULES = frozenset(
    {
        "_sql",
        "kvstore._sql",
        "kvstore._sqlite",
        "kvstore._postgres",
        "kvstore._rows",
    }
)
"""Features named by dotted path below ``operative`` (a module, or a package and all in it).

``kvstore`` as a whole is not a feature: its protocol (``kvstore._protocol``) and
``MemoryStore`` (``kvstore._memory``) are a library beneath the kernel, like
``conversation`` and ``tools``, since a toolbox consumes each signed approval through a
``ConditionalTextValueStore`` (a ``MemoryStore`` unless it is given one). Its SQL stores
are features (DESIGN.md §5): ``SqliteStore``, ``PostgresStore``, the ``SqlStore`` they
share and its row checks (``kvstore._rows``), and the SQL core under them all
(``_sql``, which durable runs and the run store use too). ``kvstore`` loads them lazily,
when a client names one."""

ALL_FEATURES = FEATURES | FEATURE_MODULES

KERNEL_SEEDS = ("_core", "_agent", "_lazy")
"""Where the kernel starts, under the root package: the run, create_agent, lazy agents."""

SEAM = (
    "attach the feature through the extension seam instead: give it an "
    "extension(config) method returning an operative.Extension and pass it as a run "
    "option (durable=, guardrails=, instrumentation=, extensions=[...]); for a type "
    "the kernel only annotates, import it under `if TYPE_CHECKING:`. See "
    "docs/extending.md and docs/design.md"
)


# -- the import graph ------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One import of a module of the package by another."""

    source: str
    target: str
    line: int
    statement: str
    """The import as written (``from ..durable import Durable``)."""
    in_function: bool
    runtime: bool
    """False under ``if TYPE_CHECKING:``."""
    lazy: frozenset[str] = frozenset()
    """For a lazy export of the package ``source``, the attributes it serves: the import is
    then the edge of each module that names one of them, not of the package."""

    def describe(self) -> str:
        where = "inside a function" if self.in_function else "at module level"
        kind = "" if self.runtime else ", under TYPE_CHECKING"
        if self.lazy:
            kind += f", lazy export of {', '.join(sorted(self.lazy))}"
        return (
            f"{self.source} imports {self.target} "
            f"(line {self.line}, {where}{kind}: `{self.statement}`)"
        )


@dataclass
class Graph:
    """The modules of one package and the imports between them."""

    package: str
    files: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def runtime_edges(self) -> dict[str, list[Import]]:
        edges: dict[str, list[Import]] = {name: [] for name in self.files}
        for found in self.imports:
            if found.runtime and not found.lazy:
                edges[found.source].append(found)
        return edges


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (whose directory is ``root``), by dotted name."""
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _walk(tree: ast.AST, *, calls: bool) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Each node of ``tree``, with whether it sits in a function / under TYPE_CHECKING
    (only statements, unless ``calls``: expressions hold no import statement)."""
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, False)]
    while stack:
        node, in_function, type_only = stack.pop()
        yield node, in_function, type_only
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((child, in_function, True) for child in node.body)
            stack.extend((child, in_function, type_only) for child in node.orelse)
            continue
        nested = in_function or isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        stack.extend(
            (child, nested, type_only)
            for child in ast.iter_child_nodes(node)
            if calls or isinstance(child, _STATEMENTS)
        )


_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _with_packages(target: str, source: str, root: str) -> Iterator[str]:
    """``target`` and each package that encloses it below ``root`` (importing
    ``a.b.c`` runs ``a.b``), except those that enclose ``source`` too."""
    parts = target.split(".")
    for end in range(2, len(parts)):
        package = ".".join(parts[:end])
        if not (source == package or source.startswith(package + ".")):
            yield package
    yield target


def _from_module(node: ast.ImportFrom, here: list[str]) -> str:
    """The module a ``from ... import`` statement imports from, made absolute."""
    if node.level:
        base = here[: len(here) - node.level + 1]
        return ".".join([*base, node.module] if node.module else base)
    return node.module or ""


def _lazy_exports(tree: ast.Module) -> dict[int, frozenset[str]]:
    """A package's lazy exports: each ``from ... import`` of its module-level
    ``__getattr__``, and each module-level ``if TYPE_CHECKING:`` import declaring only
    names those serve, by ``id`` of the statement, with the names it binds."""
    lazy: dict[int, frozenset[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    lazy[id(inner)] = frozenset(a.asname or a.name for a in inner.names)
    served = frozenset[str]().union(*lazy.values())
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom):
                    names = frozenset(a.asname or a.name for a in inner.names)
                    if names <= served:
                        lazy[id(inner)] = names
    return lazy


def read_imports(graph: Graph) -> None:
    """Parse every module of ``graph`` and record its imports of the package's modules."""
    known = graph.files
    root = graph.package
    trees: dict[str, tuple[ast.Module, list[str]]] = {}
    for source, path in graph.files.items():
        text = path.read_text()
        tree = ast.parse(text, str(path))
        is_package = path.name == "__init__.py"
        here = source.split(".") if is_package else source.split(".")[:-1]
        trees[source] = (tree, here)
        lazy = _lazy_exports(tree) if is_package else {}
        for node, in_function, type_only in _walk(tree, calls="import_module" in text):
            named: list[str] = []
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = _from_module(node, here)
                named = [module]
                named += [f"{module}.{alias.name}" for alias in node.names]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and not node.args[0].value.startswith(".")
            ):
                named = [node.args[0].value]
            else:
                continue
            targets: list[str] = []
            for name in named:
                if name in known:
                    targets.extend(_with_packages(name, source, root))
            _record(graph, source, node, targets, in_function, type_only, lazy.get(id(node)))
    _name_lazy_exports(graph, trees)


def _record(
    graph: Graph,
    source: str,
    node: ast.AST,
    targets: Iterable[str],
    in_function: bool,
    type_only: bool,
    lazy: frozenset[str] | None = None,
) -> None:
    statement = ast.unparse(node)
    for target in dict.fromkeys(targets):
        if target != source:
            graph.imports.append(
                Import(
                    source=source,
                    target=target,
                    line=getattr(node, "lineno", 0),
                    statement=statement,
                    in_function=in_function,
                    runtime=not type_only,
                    lazy=lazy or frozenset(),
                )
            )


def _name_lazy_exports(graph: Graph, trees: dict[str, tuple[ast.Module, list[str]]]) -> None:
    """Give each lazy export's imports to the modules that name it: ``from p import
    name`` (or ``*``), or ``p.name`` (any attribute ``name``) in a module importing ``p``."""
    exports: dict[str, dict[str, list[str]]] = {}
    for found in graph.imports:
        if found.lazy and found.runtime:
            for name in found.lazy:
                exports.setdefault(found.source, {}).setdefault(name, []).append(found.target)
    imported: dict[str, set[str]] = {}
    for found in graph.imports:
        imported.setdefault(found.source, set()).add(found.target)
    for source, (tree, here) in trees.items():
        packages = [p for p in exports if p in imported.get(source, ())]
        if not packages:
            continue
        for node, in_function, type_only in _walk(tree, calls=True):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                served = exports.get(_from_module(node, here), {})
                names = [alias.name for alias in node.names]
                for name in served if "*" in names else names:
                    targets += served.get(name, [])
            elif isinstance(node, ast.Attribute):
                for package in packages:
                    targets += exports[package].get(node.attr, [])
            _record(graph, source, node, targets, in_function, type_only)


def import_graph(root: Path, package: str) -> Graph:
    graph = Graph(package=package, files=module_files(root, package))
    read_imports(graph)
    return graph


# -- the rule --------------------------------------------------------------------------


def feature_of(module: str, package: str, features: Iterable[str]) -> str | None:
    """The feature ``module`` belongs to, if any: the name in ``features`` (a dotted path
    below ``package``) of the module itself or of a package that holds it."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != package:
        return None
    named = set(features)
    for end in range(2, len(parts) + 1):
        name = ".".join(parts[1:end])
        if name in named:
            return name
    return None


@dataclass
class Layering:
    """The kernel of a package and what breaks the layering rule."""

    kernel: dict[str, Import | None]
    """Each kernel module, with the import that brought it in (None for a seed)."""
    upward: list[Import]
    """Runtime imports from a kernel module into a feature."""
    type_only_upward: list[Import]
    """The same under TYPE_CHECKING (reported apart)."""
    crossing_cycles: list[tuple[frozenset[str], list[Import]]]
    """Import cycles through a kernel module and a module outside the kernel: each
    strongly connected set of modules that mixes both, with one cycle of it."""

    def why_in_kernel(self, module: str) -> str:
        chain: list[str] = []
        via = self.kernel.get(module)
        while via is not None:
            chain.append(via.source)
            via = self.kernel.get(via.source)
        if not chain:
            return f"{module} is in the kernel"
        path = " <- ".join([module, *chain])
        return f"{module} is in the kernel because of the imports {path}"


def check_layering(
    graph: Graph,
    *,
    seeds: Iterable[str] = KERNEL_SEEDS,
    features: Iterable[str] = ALL_FEATURES,
) -> Layering:
    features = frozenset(features)
    package = graph.package
    starts = tuple(f"{package}.{seed}" for seed in seeds)
    kernel: dict[str, Import | None] = {
        name: None
        for name in graph.files
        if any(name == start or name.startswith(start + ".") for start in starts)
    }
    edges = graph.runtime_edges()
    upward: list[Import] = []
    queue = deque(kernel)
    while queue:
        module = queue.popleft()
        for found in edges[module]:
            if feature_of(found.target, package, features) is not None:
                upward.append(found)
            elif found.target not in kernel:
                kernel[found.target] = found
                queue.append(found.target)
    type_only = [
        found
        for found in graph.imports
        if not found.runtime
        and not found.lazy
        and found.source in kernel
        and feature_of(found.target, package, features) is not None
    ]
    cycles = [
        (frozenset(component), _cycle_through(component, edges, kernel))
        for component in _strongly_connected(edges)
        if len(component) > 1 and component & kernel.keys() and component - kernel.keys()
    ]
    return Layering(
        kernel=kernel, upward=upward, type_only_upward=type_only, crossing_cycles=cycles
    )


def _strongly_connected(edges: dict[str, list[Import]]) -> list[set[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            advanced = False
            for found in pending:
                target = found.target
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _path(
    start: str, goal: set[str], edges: dict[str, list[Import]], within: set[str]
) -> list[Import]:
    """The shortest chain of imports from ``start`` to a module of ``goal``."""
    came: dict[str, Import | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for found in edges[module]:
            target = found.target
            if target in within and target not in came:
                came[target] = found
                if target in goal:
                    chain: list[Import] = []
                    step: Import | None = found
                    while step is not None:
                        chain.append(step)
                        step = came[step.source]
                    return chain[::-1]
                queue.append(target)
    raise AssertionError(f"no path from {start} to {goal} in a strongly connected component")


def _cycle_through(
    component: set[str], edges: dict[str, list[Import]], kernel: dict[str, Import | None]
) -> list[Import]:
    """One cycle of ``component`` that leaves the kernel and comes back."""
    start = min(component & kernel.keys())
    out = _path(start, component - kernel.keys(), edges, component)
    back = _path(out[-1].target, {start}, edges, component)
    return out + back


def report(layering: Layering) -> str:
    """What breaks the rule, and what to do about it."""
    lines = [
        f"- {found.describe()}: the kernel must not import a feature. "
        f"{layering.why_in_kernel(found.source)}. Fix: {SEAM}."
        for found in layering.upward
    ]
    for modules, cycle in layering.crossing_cycles:
        chain = "; ".join(found.describe() for found in cycle)
        outside = sorted(modules - layering.kernel.keys())
        lines.append(
            f"- an import cycle crosses the kernel boundary: {len(modules)} modules import "
            f"each other, {len(outside)} outside the kernel ({', '.join(outside)}); for "
            f"instance {chain}. Fix: the kernel side must not import the other side; {SEAM}."
        )
    return "\n".join(lines)


# -- the tests -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def operative_graph() -> tuple[Graph, Layering]:
    """The import graph of ``operative/`` and its layering, read once per module."""
    graph = import_graph(ROOT / "operative", "operative")
    return graph, check_layering(graph)


def test_the_kernel_imports_no_feature_package(
    operative_graph: tuple[Graph, Layering],
) -> None:
    """No module of the kernel imports a feature, at module level or inside a
    function, and no import cycle runs through the kernel and out of it."""
    _, layering = operative_graph
    problems = report(layering)
    assert not problems, "the layering rule is broken:\n" + problems


def test_the_graph_is_read_and_the_kernel_is_what_the_docs_say(
    operative_graph: tuple[Graph, Layering],
) -> None:
    """The checker sees the tree it checks: the kernel holds the run and what it needs,
    the features import the kernel (the right direction), and no feature is kernel. The
    kernel stops at the key-value protocol and ``MemoryStore``: the SQL stores load when
    a client names one, and that client imports them."""
    graph, layering = operative_graph
    kernel = layering.kernel.keys()
    for module in (
        "operative._core._run",
        "operative._core._extension",
        "operative._core._open_run",
        "operative._agent",
        "operative._lazy._run",
        "operative.conversation",
        "operative.tools._toolbox",
        "operative.liveness",
        "operative.kvstore",
        "operative.kvstore._protocol",
        "operative.kvstore._memory",
    ):
        assert module in kernel, module
    assert not [m for m in kernel if feature_of(m, "operative", ALL_FEATURES)]
    for module in ("operative._sql", "operative.kvstore._sqlite", "operative.kvstore._rows"):
        assert feature_of(module, "operative", ALL_FEATURES), module
    assert "operative" not in kernel, layering.why_in_kernel("operative")
    runtime = {(found.source, found.target) for found in graph.imports if found.runtime}
    assert ("operative.durable._driver", "operative._core._extension") in runtime
    assert ("operative.guardrails._runner", "operative._core._extension") in runtime
    assert ("operative.cli._serve", "operative.kvstore._sqlite") in runtime
    edges = graph.runtime_edges()
    assert "operative.kvstore._sqlite" not in {f.target for f in edges["operative.kvstore"]}
    assert len(runtime) > 500


def test_the_kernel_names_no_feature_type(operative_graph: tuple[Graph, Layering]) -> None:
    """Not even for annotations: what a feature needs of the run is the kernel's own
    types (``ActiveRun``, ``Extension``), never the other way round."""
    _, layering = operative_graph
    assert not layering.type_only_upward, "\n".join(
        f"- {found.describe()}: the kernel names a feature's type. Fix: {SEAM}."
        for found in layering.type_only_upward
    )


# -- the checker on a package made to break the rule ------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


_CLEAN = {
    "__init__.py": "from ._core._run import Run\nfrom .durable import Journal\n",
    "_core/__init__.py": "",
    "_core/_run.py": (
        "from typing import TYPE_CHECKING\n"
        "from ..helpers import helper\n"
        "if TYPE_CHECKING:\n"
        "    from ..durable import Journal\n"
        "class Run:\n"
        "    journal: 'Journal | None' = None\n"
    ),
    "_agent.py": "from ._core import _run\n",
    "helpers.py": "import json\n\ndef helper():\n    return json\n",
    "durable/__init__.py": "from ._journal import Journal\n",
    "durable/_journal.py": "from .._core._run import Run\n\nclass Journal(Run):\n    pass\n",
}


def test_the_checker_passes_a_package_that_keeps_the_rule(tmp_path: Path) -> None:
    """Features importing the kernel, and a type-only mention the other way, are fine."""
    _write(tmp_path / "pkg", _CLEAN)
    layering = check_layering(import_graph(tmp_path / "pkg", "pkg"))
    assert report(layering) == ""
    assert set(layering.kernel) == {"pkg._core", "pkg._core._run", "pkg._agent", "pkg.helpers"}
    assert [found.statement for found in layering.type_only_upward] == [
        "from ..durable import Journal"
    ]


def test_the_checker_reports_an_import_inside_a_function(tmp_path: Path) -> None:
    """A function-level import from the kernel into a feature is reported, by name and
    line, with what to do; so is the cycle it closes (the feature imports the kernel)."""
    files = dict(_CLEAN)
    files["_core/_run.py"] += "\ndef journal_for(run):\n    from ..durable import Journal\n"
    _write(tmp_path / "pkg", files)
    layering = check_layering(import_graph(tmp_path / "pkg", "pkg"))
    assert [(f.source, f.target, f.line, f.in_function) for f in layering.upward] == [
        ("pkg._core._run", "pkg.durable", 9, True)
    ]
    message = report(layering)
    assert (
        "pkg._core._run imports pkg.durable (line 9, inside a function: "
        "`from ..durable import Journal`): the kernel must not import a feature."
    ) in message
    assert "extension seam" in message
    assert "docs/extending.md" in message
    ((modules, cycle),) = layering.crossing_cycles
    assert modules == {"pkg._core._run", "pkg.durable", "pkg.durable._journal"}
    assert [(f.source, f.target) for f in cycle] == [
        ("pkg._core._run", "pkg.durable"),
        ("pkg.durable", "pkg.durable._journal"),
        ("pkg.durable._journal", "pkg._core._run"),
    ]
    assert (
        "an import cycle crosses the kernel boundary: 3 modules import each other, 2 "
        "outside the kernel (pkg.durable, pkg.durable._journal)"
    ) in message


def test_the_checker_follows_the_kernel_through_helper_modules(tmp_path: Path) -> None:
    """A non-feature module the kernel imports is kernel too: its import of a feature
    (here of a feature's submodule, by ``import a.b.c`` and by ``import_module``) is
    reported, with the chain that made it kernel."""
    files = dict(_CLEAN)
    files["helpers.py"] = (
        "import importlib\nimport pkg.durable._journal\n\n"
        "def later():\n    return importlib.import_module('pkg.guardrails')\n"
    )
    files["guardrails/__init__.py"] = ""
    _write(tmp_path / "pkg", files)
    layering = check_layering(import_graph(tmp_path / "pkg", "pkg"))
    upward = {(f.source, f.target, f.line) for f in layering.upward}
    assert upward == {
        ("pkg.helpers", "pkg.durable", 2),
        ("pkg.helpers", "pkg.durable._journal", 2),
        ("pkg.helpers", "pkg.guardrails", 5),
    }
    assert "pkg.helpers is in the kernel because of the imports pkg.helpers <- pkg._core._run" in (
        report(layering)
    )


def test_the_checker_gives_a_lazy_export_to_whoever_names_it(tmp_path: Path) -> None:
    """A package the kernel uses may load a feature module in its ``__getattr__`` (and
    declare it under TYPE_CHECKING): that is no import of the kernel's, until a kernel
    module names the attribute, by ``from`` or as an attribute of the package."""
    files = dict(_CLEAN)
    files["kv/__init__.py"] = (
        "import typing\n"
        "from ._memory import Memory\n"
        "if typing.TYPE_CHECKING:\n"
        "    from ._sql import SqlStore as SqlStore\n"
        "def __getattr__(name):\n"
        "    if name == 'SqlStore':\n"
        "        from ._sql import SqlStore\n"
        "        return SqlStore\n"
        "    raise AttributeError(name)\n"
    )
    files["kv/_memory.py"] = "class Memory:\n    pass\n"
    files["kv/_sql.py"] = "from .._core._run import Run\n\nclass SqlStore(Run):\n    pass\n"
    files["helpers.py"] = "from .kv._memory import Memory\n"
    _write(tmp_path / "pkg", files)
    features = {"durable", "kv._sql"}
    layering = check_layering(import_graph(tmp_path / "pkg", "pkg"), features=features)
    assert report(layering) == ""
    assert {"pkg.kv", "pkg.kv._memory"} <= layering.kernel.keys()
    assert "pkg.kv._sql" not in layering.kernel
    assert [f.target for f in layering.type_only_upward] == ["pkg.durable"]

    files["helpers.py"] = (
        "from .kv import SqlStore\nimport pkg.kv\n\ndef later():\n    return pkg.kv.SqlStore\n"
    )
    _write(tmp_path / "pkg", files)
    layering = check_layering(import_graph(tmp_path / "pkg", "pkg"), features=features)
    assert {(f.source, f.target, f.line, f.in_function) for f in layering.upward} == {
        ("pkg.helpers", "pkg.kv._sql", 1, False),
        ("pkg.helpers", "pkg.kv._sql", 5, True),
    }
    assert "`from .kv import SqlStore`" in report(layering)
