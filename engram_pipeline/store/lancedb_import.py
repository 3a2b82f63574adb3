"""Import LanceDB without building the pydantic models of its REST namespace client.

``import lancedb`` imports ``lance_namespace``, which imports every request and response model of
``lance_namespace_urllib3_client`` (several hundred pydantic classes for LanceDB's remote catalog): building
their validators took 0.8 of the 1.9 CPU-s ``import lancedb`` costs, in every process that opens a store
(``bench/profile_startup.py``). A store on a directory or object storage never validates one of them. While
LanceDB imports, pydantic's default ``defer_build`` is on, so those classes build on first use instead, if ever;
the default is restored after, so no other model is affected.

pydantic keeps its defaults in a private module (``pydantic._internal._config``, pinned with the core stack);
where it moves, LanceDB is imported as usual, only slower.
"""

from __future__ import annotations

import sys


def import_lancedb() -> None:
    """Import ``lancedb`` (once per process) with pydantic's models deferred while it imports."""
    if "lancedb" in sys.modules:
        return
    try:
        from pydantic._internal._config import config_defaults
    except ImportError:  # pragma: no cover - pydantic moved its defaults: import as usual
        config_defaults = {}
    before = config_defaults.get("defer_build", False)
    config_defaults["defer_build"] = True
    try:
        import lancedb  # noqa: F401
    finally:
        config_defaults["defer_build"] = before
