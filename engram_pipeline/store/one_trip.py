"""Several LanceDB reads in one trip through lancedb's event loop, run at once.

lancedb's synchronous table runs each call as a coroutine on its background event loop thread and waits for
it. A filtered read or a vector search through it is five or six such trips (the table schema, twice more for
blob columns, the query, then each batch), and every trip waits for that thread to be scheduled, which
costs a ``remember`` most on a loaded machine (``docs/scale.md``, "How the write path was measured"). The
write path's reads before its commit go through here.

The coroutines are those of lancedb's ``AsyncTable``, which the synchronous ``LanceTable`` wraps
(``table._table`` in lancedb 0.40, the pinned version). This is the one module that reaches that private
attribute and lancedb's loop (``tests/lib/test_layering.py`` checks it): a separate ``lancedb.connect_async``
connection would double the table handles and re-read each new manifest the writing handle already holds (one
more GET per read after a write on S3; ``docs/scale.md``, "One table handle, not a second async one"). The
store's tables have no blob columns, so the synchronous path's blob post-processing has nothing to do and is not
repeated here. A search here filters before it ranks (``where`` is a prefilter on an async query, as
``prefilter=True`` is on a synchronous one).

>>> import lancedb
>>> table = lancedb.connect("memory://").create_table("t", [{"vector": [1.0, 0.0], "name": "a"}])
>>> found, latest, n = run(together(rows(table, "name = 'a'", columns=["name"]), version(table), count(table)))
>>> found.to_pylist(), latest, n
([{'name': 'a'}], 1, 1)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from lancedb.background_loop import LOOP

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on lancedb's event loop (one trip) and return its result."""
    loop_run: Callable[[Coroutine[Any, Any, T]], T] = LOOP.run  # lancedb's loop is untyped
    return loop_run(coro)


async def together(*coros: Coroutine[Any, Any, Any]) -> list[Any]:
    """The results of ``coros``, run at once (inside one trip)."""
    return list(await asyncio.gather(*coros))


async def count(table: Any, where: str | None = None) -> int:
    """The number of rows of ``table`` passing ``where`` (all rows if None), as ``table.count_rows`` counts them."""
    return int(await table._table.count_rows(where))


async def version(table: Any) -> int:
    """The latest version of ``table`` (as ``table.version`` reads it)."""
    return int(await table._table.version())


async def rows(
    table: Any, where: str | None, *, columns: Sequence[str] | None = None, limit: int | None = None
) -> pa.Table:
    """Every row of ``table`` passing ``where`` (all rows if None; ``columns`` of them, or all; at most
    ``limit``), as ``search().where(...).limit(limit)`` reads them."""
    query = table._table.query()
    if where is not None:
        query = query.where(where)
    if columns is not None:
        query = query.select(list(columns))
    if limit is not None:
        query = query.limit(limit)
    return await query.to_arrow()


def read(
    table: Any, where: str | None = None, *, columns: Sequence[str] | None = None, limit: int | None = None
) -> pa.Table:
    """:func:`rows` in one trip: the synchronous read the store's modules use instead of ``table.search()``.

    >>> import lancedb
    >>> table = lancedb.connect("memory://").create_table("t", [{"n": 1, "s": "a"}, {"n": 2, "s": "b"}])
    >>> read(table, "n > 1", columns=["s"]).to_pylist(), read(table, limit=1).num_rows
    ([{'s': 'b'}], 1)
    """
    return run(rows(table, where, columns=columns, limit=limit))


async def nearest(
    table: Any, vectors: Sequence[Sequence[float]], where: str, *, k: int, columns: Sequence[str] | None = None
) -> pa.Table:
    """The ``k`` nearest rows to each of ``vectors`` by cosine distance among those passing ``where``: their
    ``columns`` (or all) with ``_distance``, and ``query_index`` when there are several vectors (one query
    for them all)."""
    query = list(vectors) if len(vectors) > 1 else vectors[0]
    search = table._table.vector_search(query).distance_type("cosine").where(where).limit(k)
    if columns is not None:
        search = search.select([*columns, "_distance"])
    return await search.to_arrow()
