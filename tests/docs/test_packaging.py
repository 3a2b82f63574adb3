"""Packaging shows the architecture: declared dependencies are what the code imports, in both directions.

The library (``engram_pipeline`` minus its shells) depends only on the core list of ``pyproject.toml``; each
extra belongs to the modules named in ``EXTRA_HOMES``; nothing in the library imports Dagster. A second test
imports every core module in a process where the extras cannot be imported at all, so a stray top-level import
of an optional part fails here rather than on a user's machine.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# where each extra may be imported (a path prefix under the repository root)
EXTRA_HOMES = {
    "api": ("engram_pipeline/api/",),
    "plot": ("engram_pipeline/lifecycle/health.py",),
    "minilm": ("engram_pipeline/embed/minilm.py", "engram_pipeline/pair_model.py"),
    "dagster": ("assets/",),
    "deploy": ("deploy/",),
}
# declared but never imported, each for a reason given beside it in pyproject.toml
NOT_IMPORTED = {
    "dagster-webserver",
    "dagster-postgres",
    "psycopg2-binary",
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _distribution_of() -> dict[str, str]:
    """Top-level import name -> distribution name, for what is installed."""
    out = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        names = [d.lower().replace("_", "-") for d in dists]
        # several distributions may install into one top-level package (mcp and mcp-types): take its namesake
        out[module] = next((n for n in names if n == module.replace("_", "-")), names[0])
    return out


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file, function-level ones included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _third_party_by_file() -> dict[str, set[str]]:
    dist_of = _distribution_of()
    local = {"engram_pipeline", "assets", "deploy"}
    found: dict[str, set[str]] = {}
    for path in sorted(
        [*ROOT.glob("engram_pipeline/**/*.py"), *ROOT.glob("assets/**/*.py"), *ROOT.glob("deploy/**/*.py")]
    ):
        rel = path.relative_to(ROOT).as_posix()
        dists = {dist_of[name] for name in _imports(path) - local - set(sys.stdlib_module_names) if name in dist_of}
        unknown = {n for n in _imports(path) - local - set(sys.stdlib_module_names) if n not in dist_of}
        assert not unknown, f"{rel} imports {sorted(unknown)}, which no installed distribution provides"
        found[rel] = dists
    return found


def _home(rel: str) -> str:
    for extra, prefixes in EXTRA_HOMES.items():
        if rel.startswith(prefixes):
            return extra
    return "core"


def test_declared_dependencies_are_what_the_code_imports() -> None:
    declared = {"core": {_name(r) for r in PYPROJECT["project"]["dependencies"]}}
    for extra in EXTRA_HOMES:
        declared[extra] = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]}

    used: dict[str, set[str]] = {home: set() for home in declared}
    for rel, dists in _third_party_by_file().items():
        home = _home(rel)
        allowed = declared["core"] | declared[home]
        missing = dists - allowed
        assert not missing, f"{rel} imports {sorted(missing)}, not declared in the core list or the [{home}] extra"
        used[home] |= dists
    used_anywhere = set().union(*used.values())

    for home, names in declared.items():
        unused = names - NOT_IMPORTED - (used[home] if home != "core" else used_anywhere)
        assert not unused, f"{sorted(unused)} declared in {home!r} but never imported there: drop or move them"


def test_the_library_never_imports_dagster() -> None:
    for rel, dists in _third_party_by_file().items():
        if rel.startswith("engram_pipeline/"):
            assert not dists & {"dagster", "dagster-webserver"}, f"{rel} imports Dagster; that belongs in assets/"


BLOCK_EXTRAS = """
import pkgutil, sys
# None in sys.modules: `import x` raises ImportError and importlib.util.find_spec("x") answers None, as if absent
for name in ("dagster", "fastapi", "fastapi_offline", "uvicorn", "mcp", "matplotlib", "torch", "sentence_transformers",
             "transformers", "safetensors"):
    sys.modules[name] = None
import engram_pipeline
skip = ("engram_pipeline.api",)
for info in pkgutil.walk_packages(engram_pipeline.__path__, "engram_pipeline."):
    if not info.name.startswith(skip):
        __import__(info.name)
from typer.testing import CliRunner
from engram_pipeline.cli import app
result = CliRunner().invoke(app, ["--help"])
assert result.exit_code == 0, result.output
print("ok", len(sys.modules))
"""


def test_the_core_library_and_cli_import_without_any_extra() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


def test_pylance_is_the_lance_built_into_lancedb() -> None:
    """The store commits to one dataset through lancedb's own copy of the lance crates and through ``pylance``
    (store/write/compaction.py): both must be one lance release. With pylance 9.0.0 beside lancedb 0.40's lance
    13.0.0, ``optimize_indices`` hung for seconds on end and failed on index files it could not find."""
    import lance
    import lancedb

    binary = next(Path(lancedb.__file__).parent.glob("_lancedb*.so"))
    built_in = set(re.findall(rb"lance-core-(\d+\.\d+\.\d+)", binary.read_bytes()))
    assert built_in, f"no lance-core version string in {binary}"
    assert built_in == {lance.__version__.encode()}, (
        f"lancedb {lancedb.__version__} is built with lance {sorted(v.decode() for v in built_in)}, "
        f"pylance is {lance.__version__}: pin pylance in pyproject.toml to the built-in release"
    )
