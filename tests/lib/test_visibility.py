"""The visibility rule's three forms (LanceDB SQL, row predicate, polars expression) agree on every status."""

from __future__ import annotations

import itertools

import lancedb
import polars as pl
import pyarrow as pa

from engram_pipeline.model import STATUSES
from engram_pipeline.visibility import HIDDEN_STATUSES, VISIBLE_SQL, is_visible, visible_expr


def test_sql_row_and_polars_forms_agree_on_every_status_combination(tmp_path) -> None:
    combos = list(itertools.product(STATUSES, (None, "canonical-id")))
    rows = [{"id": f"r{i}", "status": s, "superseded_by": by} for i, (s, by) in enumerate(combos)]
    schema = pa.schema([("id", pa.string()), ("status", pa.string()), ("superseded_by", pa.string())])
    table = lancedb.connect(str(tmp_path)).create_table("rows", pa.Table.from_pylist(rows, schema=schema))

    by_sql = set(table.search().where(VISIBLE_SQL).limit(None).to_arrow()["id"].to_pylist())
    by_row = {r["id"] for r in rows if is_visible(r)}
    by_polars = set(
        pl.DataFrame(rows, schema={"id": pl.String, "status": pl.String, "superseded_by": pl.String})
        .filter(visible_expr())["id"]
        .to_list()
    )

    assert by_sql == by_row == by_polars
    # and the rule itself: visible unless hidden by status or by the durable superseded_by marker
    assert by_row == {r["id"] for r in rows if r["status"] not in HIDDEN_STATUSES and r["superseded_by"] is None}
    assert {r["status"] for r in rows if r["id"] in by_row} == {"active", "stale", "contradicted"}
