"""The library's layering, checked on its source (``ast``, nothing imported).

* The import graph of ``engram_pipeline`` is a DAG. Every import counts, at module level and inside
  functions; only those under ``if TYPE_CHECKING:`` do not (they never run). Importing ``a.b.c`` from outside
  the package ``a.b`` runs ``a/b/__init__.py`` first, so it is an edge to that ``__init__`` too: a module
  that the store package imports must not import anything from the store package.
* No module outside ``engram_pipeline/store/`` touches a LanceDB table object of the store (``store.memories``,
  ``store.audit.table``, ...) or a private helper of the store (``store._vector_for``, ``store._by_hash``): they
  use the store's verbs.
* Only ``engram_pipeline/store/one_trip.py`` reaches lancedb's private parts (the ``AsyncTable`` behind a
  synchronous table, lancedb's event loop); the others call its functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "engram_pipeline"
PACKAGE = "engram_pipeline"

# A store's LanceDB tables and connection, and the table each collaborator owns (``store.audit.table``).
TABLE_ATTRIBUTES = frozenset({"memories", "db"})
COLLABORATOR_TABLE = "table"
# LanceDB table methods: on ``store.<anything>`` they are table access, whatever the attribute is called.
TABLE_METHODS = frozenset(
    {"search", "count_rows", "merge_insert", "to_arrow", "list_versions", "optimize", "create_index", "checkout"}
    | {"list_indices", "index_stats", "checkout_latest"}
)
# The store's own helpers that passes must not reach for (any ``_name`` on a store is private too).
PRIVATE_HELPERS = frozenset({"_vector_for", "_by_hash", "_first_committed"})


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(LIBRARY.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the tree but under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The library modules an import statement in ``module`` runs."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")
            is_package = modules[module].name == "__init__.py"
            anchor = package if is_package else package[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
        # ``from pkg import sub`` inside ``pkg`` imports ``pkg.sub``; ``pkg`` itself is already running.
        inside = module == base or module.startswith(base + ".")
        whole = len(submodules) < len(node.names) or not inside
        named = ([base] if whole else []) + submodules
    out: set[str] = set()
    for name in named:
        if name not in modules:
            continue
        out.add(name)
        # The packages above ``name`` run first; those that contain ``module`` are already running.
        parts = name.split(".")
        for n in range(1, len(parts)):
            package = ".".join(parts[:n])
            if package in modules and not (module == package or module.startswith(package + ".")):
                out.add(package)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in _runtime_imports(tree):
            edges |= _targets(name, node, modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_library_import_graph_is_a_dag() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.store.core" in graph, "the scan found the library"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_names_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    if isinstance(node, ast.Call):  # ``engram.open().memories``, ``store().memories``
        inner = _dotted(node.func)
        return None if inner is None else f"{inner}()"
    return None


def _is_store(dotted: str) -> bool:
    """Whether an expression names a store or its engine: ``store``, ``self.store``, ``st.store``, ``store()``,
    ``x.open()``, ``store.engine``."""
    dotted = dotted.removesuffix(".engine")
    last = dotted.rsplit(".", 1)[-1]
    return last in ("store", "store()", "open()")


def store_internals_outside_store() -> list[str]:
    """``path:line expression`` for each place outside ``engram_pipeline/store/`` that reaches into a store."""
    found: list[str] = []
    files = [*LIBRARY.rglob("*.py"), *(ROOT / "assets").rglob("*.py")]
    for path in sorted(files):
        if (LIBRARY / "store") in path.parents:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            owner = _dotted(node.value)
            if node.attr in PRIVATE_HELPERS:
                hit = True
            elif owner is None:
                hit = False
            elif _is_store(owner):
                hit = node.attr in TABLE_ATTRIBUTES or (node.attr.startswith("_") and not node.attr.startswith("__"))
            else:
                on_part = "." in owner and _is_store(owner.rsplit(".", 1)[0])
                hit = on_part and (node.attr == COLLABORATOR_TABLE or node.attr in TABLE_METHODS)
            if hit:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {owner}.{node.attr}")
    return found


def test_the_scan_sees_table_access() -> None:
    tree = ast.parse("store.engine.memories.search()\nself.store.audit.table.add(x)\nengram.open().memories\nst.db")
    owners = [_dotted(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert "engram.open()" in owners and "self.store.audit" in owners and "store.engine" in owners
    assert _is_store("self.store") and _is_store("engram.open()") and _is_store("store.engine")
    assert not _is_store("st")


def test_no_table_or_private_store_helper_outside_the_store() -> None:
    found = store_internals_outside_store()
    assert not found, "use a store verb instead of:\n" + "\n".join(found)


# lancedb's private parts: the ``AsyncTable`` behind a synchronous table (``table._table``) and the event loop
# its calls run on (``lancedb.background_loop``). One module reaches them, for every other.
ONE_TRIP = LIBRARY / "store" / "one_trip.py"
LANCEDB_LOOP = "lancedb.background_loop"


def lancedb_internals(source: str) -> list[int]:
    """The lines of ``source`` that reach lancedb's private parts: an attribute ``_table`` (a module's own
    attribute of that name reads the same, so none is called so) or an import of ``lancedb.background_loop``."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            hit = node.attr == "_table"
        elif isinstance(node, ast.Import):
            hit = any(a.name == LANCEDB_LOOP or a.name.startswith(LANCEDB_LOOP + ".") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            hit = module == LANCEDB_LOOP or (
                module == "lancedb" and any(a.name == "background_loop" for a in node.names)
            )
        else:
            hit = False
        if hit:
            found.append(node.lineno)
    return sorted(found)


def test_the_scan_sees_lancedb_internals() -> None:
    reaching = [
        "n = table._table.count_rows()",
        "from lancedb.background_loop import LOOP",
        "import lancedb.background_loop",
        "from lancedb import background_loop",
    ]
    assert lancedb_internals("\n".join(reaching)) == [1, 2, 3, 4]
    assert lancedb_internals("table.count_rows()\nfrom lancedb.index import BTree\n'table._table'\n") == []


def test_only_one_trip_reaches_into_lancedb() -> None:
    """Every other module goes through :mod:`engram_pipeline.store.one_trip` (its docstring says why)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(LIBRARY.rglob("*.py"))
        if path != ONE_TRIP
        for line in lancedb_internals(path.read_text())
    ]
    assert not found, "reach lancedb's AsyncTable through a function of store/one_trip.py instead of:\n" + "\n".join(
        found
    )
