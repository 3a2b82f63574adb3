"""The package root: its public names are the documented ones (docs/library.md, with their signatures), each the
object its home module defines, loaded on first use; the package is marked typed."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any, is_typeddict

import engram_pipeline

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_is_the_object_of_its_home_module() -> None:
    assert engram_pipeline.__all__ == sorted(engram_pipeline._HOMES)
    for name, home in engram_pipeline._HOMES.items():
        assert getattr(engram_pipeline, name) is getattr(importlib.import_module(home), name), name
    assert set(engram_pipeline.__all__) <= set(dir(engram_pipeline))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        engram_pipeline.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_package_loads_no_store_no_model_and_no_dagster() -> None:
    code = (
        "import sys, engram_pipeline\n"
        "heavy = [m for m in ('lancedb', 'polars', 'torch', 'dagster', 'engram_pipeline.store') if m in sys.modules]\n"
        "print(heavy)\n"
        "from engram_pipeline import MemoryStore\n"
        "print('lancedb' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]", "True"]


def test_the_package_is_marked_typed() -> None:
    assert (ROOT / "engram_pipeline" / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


# The public surface, written out: every root name, and each public attribute, method and property of MemoryStore
# (and Settings), with its signature. docs/library.md holds it between these markers; a change to the surface
# changes that page too (`python tests/lib/test_public_api.py --write` rewrites the block).
LIBRARY_DOC = ROOT / "docs" / "library.md"
BEGIN, END = "<!-- public surface: begin -->", "<!-- public surface: end -->"


def _annotation(annotation: Any) -> str:
    """An annotation as written in the source (they are strings there: ``from __future__ import annotations``)."""
    return getattr(annotation, "__forward_arg__", annotation if isinstance(annotation, str) else repr(annotation))


def _signature(obj: Any) -> str:
    sig = inspect.signature(obj)
    parts: list[str] = []
    starred = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not starred:
            parts.append("*")
        starred = starred or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        text += "" if p.annotation is p.empty else f": {_annotation(p.annotation)}"
        parts.append(text + ("" if p.default is p.empty else f" = {p.default!r}"))
    returns = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(parts)}){returns}"


def _members(cls: type) -> list[str]:
    lines = []
    if not dataclasses.is_dataclass(cls):  # a dataclass's annotations are its fields, listed elsewhere
        annotations = vars(cls).get("__annotations__", {})
        public = sorted((n, a) for n, a in annotations.items() if not n.startswith("_"))
        lines += [f"    attribute {n}: {_annotation(a)}" for n, a in public]
    for name in sorted(vars(cls)):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            returns = inspect.signature(member.fget).return_annotation if member.fget else "Any"
            lines.append(f"    property {name}: {_annotation(returns)}")
        elif isinstance(member, classmethod | staticmethod):
            lines.append(f"    {type(member).__name__} {name}{_signature(member.__func__)}")
        elif callable(member):
            lines.append(f"    def {name}{_signature(member)}")
    return lines


def surface() -> str:
    """The public surface as text: one entry per root name, MemoryStore's and Settings' members below theirs."""
    lines = []
    for name in engram_pipeline.__all__:
        obj = getattr(engram_pipeline, name)
        if not inspect.isclass(obj):
            lines.append(f"def {name}{_signature(obj)}" if inspect.isfunction(obj) else f"{name} = {obj!r}")
        elif issubclass(obj, BaseException):
            lines.append(f"exception {name}({', '.join(b.__name__ for b in obj.__bases__)})")
        elif is_typeddict(obj):
            keys = ", ".join(f"{k}: {_annotation(v)}" for k, v in obj.__annotations__.items())
            lines.append(f"typeddict {name}({keys})")
        elif name == "Settings":  # its fields are the variables of docs/configuration.md, checked there
            lines += [f"dataclass {name}(...)", *_members(obj)]
        elif dataclasses.is_dataclass(obj):
            lines.append(f"dataclass {name}{_signature(obj)}")
        else:
            lines += [f"class {name}", *_members(obj)]
    return "\n".join(lines) + "\n"


def _documented() -> str:
    text = LIBRARY_DOC.read_text(encoding="utf-8")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip().removeprefix("```").removesuffix("```").strip() + "\n"


def test_the_public_surface_is_the_documented_one() -> None:
    assert _documented() == surface(), (
        "the public surface changed: update docs/library.md (python tests/lib/test_public_api.py --write)"
    )


def test_the_surface_names_every_store_verb_with_its_signature() -> None:
    text = surface()
    assert "    def remember(self, agent_id: str, content: str, *," in text
    assert "    classmethod open(" in text
    assert "exception RestoreDuplicate(NothingToRestore)" in text


def test_each_facade_verb_takes_what_the_engine_verb_takes() -> None:
    """``MemoryStore`` writes its verbs' signatures out; each must take the parameters of the engine's verb it
    calls, with the same kinds and defaults, so that a keyword added to the engine (or to the module function it
    binds) is not missing from the public verb (mypy catches a removed one, not a missing one)."""
    import inspect

    from engram_pipeline.store import MemoryStore
    from engram_pipeline.store.core import ShardedEngine

    verbs = [n for n, v in vars(MemoryStore).items() if callable(v) and not n.startswith("_") and n != "open"]
    assert {"remember", "remember_async", "recall", "update", "maintain"} <= set(verbs)
    for name in verbs:
        facade = inspect.signature(getattr(MemoryStore, name)).parameters
        engine = inspect.signature(getattr(ShardedEngine, name)).parameters
        want = [(p.name, p.kind, p.default) for p in engine.values() if p.name not in ("self", "store")]
        assert [(p.name, p.kind, p.default) for p in facade.values() if p.name != "self"] == want, name


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    page = LIBRARY_DOC.read_text(encoding="utf-8")
    head, rest = page.split(BEGIN, 1)
    LIBRARY_DOC.write_text(f"{head}{BEGIN}\n```\n{surface()}```\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
