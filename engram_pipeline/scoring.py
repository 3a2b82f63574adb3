"""Importance and confidence scores, vectorized over Arrow/polars columns.

Importance follows the memory server this project descends from::

    raw   = 0.35                                   base
          + min(0.25, 0.04 * log2(access_count + 1))  access boost
          + 0.18 if decision words ("decided", "we chose", ...)
          + 0.12 if problem words ("error", "bug", ...)
          + 0.10 if milestone words ("shipped", "released", ...)
          + 0.08 if tagged critical / important / pinned
          + 0.25 if pinned
    score = clip(raw * exp(-ln2 * age_days / half_life), 0, 1), at least 0.9 when pinned

``age_days`` runs from the last access, else from creation. :func:`importance_frame` scores a whole agent
in one vectorized pass and returns each row's factors as JSON text, for the ``importance_factors`` column.

The factors also carry how much the row says (:mod:`engram_pipeline.information`): ``information`` (the score),
``information_cues`` (why) and ``information_model`` (which model scored it). The write path records them
(:func:`engram_pipeline.store.rows.build_row`); a pass that re-scores carries them over from the row's previous
factors and computes them only where they are missing or another model scored them (the backfill), so the
text is read once per model.

>>> import polars as pl
>>> from datetime import datetime, UTC
>>> now = datetime(2026, 1, 15, tzinfo=UTC)
>>> df = pl.DataFrame({"content": ["We decided to use Postgres"], "tags": [["critical"]], "pinned": [False],
...     "access_count": [0], "created_at": [datetime(2026, 1, 1, tzinfo=UTC)], "last_accessed_at": [None]})
>>> round(importance_frame(df, now=now, half_life_days=14)["importance"][0], 4)
0.305
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import polars as pl

from engram_pipeline.information import information_factors, model
from engram_pipeline.model import polars_schema

DECISION = r"(?i)\b(decided|decision|we chose|chose to|agreed|settled on|going with|approved|committed to)\b"
PROBLEM = r"(?i)\b(error|bug|issue|problem|fail(ed|ure|s)?|broken|crash(ed|es)?|blocked|exception|incident|outage)\b"
MILESTONE = r"(?i)\b(launched|released|shipped|completed|finished|milestone|deployed|achieved|reached|went live)\b"
FLAG_TAGS = ["critical", "important", "pinned"]

LN2 = math.log(2.0)
DIGITS = 12
FACTORS = ("base", "access", "decision", "problem", "milestone", "tag", "pin", "recency", "age_days")
INFORMATION = pl.Struct(
    {"information": pl.Float64, "information_cues": pl.List(pl.String), "information_model": pl.String}
)


def information_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``information``, ``information_cues`` and ``information_model`` of each row of ``df``: carried over from
    its ``importance_factors`` (if the frame has them) when the shipped model scored them, else computed from
    ``content``."""
    if "importance_factors" in df.columns:
        old = df.select(pl.col("importance_factors").str.json_decode(INFORMATION).struct.unnest())
    else:
        old = pl.DataFrame(schema=dict(INFORMATION.to_schema())).clear(df.height)
    stale = (old["information"].is_null() | old["information_model"].ne_missing(model().version)).to_list()
    if not any(stale):
        return old
    todo = [i for i, s in enumerate(stale) if s]
    fresh = pl.DataFrame(information_factors([df["content"][i] or "" for i in todo]), schema=INFORMATION.to_schema())
    index = pl.Series("i", todo, dtype=pl.UInt32)
    return old.with_row_index("i").update(fresh.with_columns(index), on="i").drop("i")


def importance_frame(df: pl.DataFrame, *, now: datetime, half_life_days: float) -> pl.DataFrame:
    """Score every row of ``df`` (columns ``content``, ``tags``, ``pinned``, ``access_count``,
    ``created_at``, ``last_accessed_at``, and optionally their old ``importance_factors``); returns
    ``importance`` and ``importance_factors`` (JSON text, with the information score: see the module docstring)."""
    ref = pl.coalesce(pl.col("last_accessed_at"), pl.col("created_at"))
    age_days = ((pl.lit(now) - ref).dt.total_microseconds() / 86_400e6).clip(lower_bound=0.0)
    access = pl.col("access_count").fill_null(0).cast(pl.Float64)
    pinned = pl.col("pinned").fill_null(False)
    tags = pl.col("tags").fill_null([])
    factors = pl.struct(
        base=pl.lit(0.35),
        access=pl.min_horizontal(pl.lit(0.25), 0.04 * (access + 1.0).log(2)),
        decision=pl.when(pl.col("content").str.contains(DECISION)).then(0.18).otherwise(0.0),
        problem=pl.when(pl.col("content").str.contains(PROBLEM)).then(0.12).otherwise(0.0),
        milestone=pl.when(pl.col("content").str.contains(MILESTONE)).then(0.10).otherwise(0.0),
        tag=pl.when(tags.list.eval(pl.element().str.to_lowercase().is_in(FLAG_TAGS)).list.any())
        .then(0.08)
        .otherwise(0.0),
        pin=pl.when(pinned).then(0.25).otherwise(0.0),
        recency=(-LN2 * age_days / half_life_days).exp(),
        age_days=age_days,
    )
    info = information_frame(df)
    out = pl.concat([df.select(factors.alias("f"), pinned.alias("_pinned")), info], how="horizontal")
    f = pl.col("f").struct
    raw = f.field("base") + f.field("access") + f.field("decision") + f.field("problem") + f.field("milestone")
    raw = raw + f.field("tag") + f.field("pin")
    score = (raw * f.field("recency")).clip(0.0, 1.0)
    score = pl.when(pl.col("_pinned")).then(pl.max_horizontal(score, pl.lit(0.9))).otherwise(score)
    # The score without its recency factor: what recall ranks on, since recall weighs recency on its own and
    # counting age twice ranks a month-old fact below yesterday's small talk (bench_decay_safety.py).
    significance = raw.clip(0.0, 1.0)
    significance = pl.when(pl.col("_pinned")).then(pl.max_horizontal(significance, pl.lit(0.9))).otherwise(significance)
    # Rounded: polars' exp() may differ in the last bits between frame sizes (SIMD lanes), and a re-score of
    # unchanged rows at the same instant must compare equal, or a second decay pass would rewrite them.
    score = score.round(DIGITS)
    rounded = [pl.field(name).round(DIGITS) for name in FACTORS]
    return out.select(
        score.alias("importance"),
        pl.col("f")
        .struct.with_fields(
            *rounded,
            score=score,
            significance=significance.round(DIGITS),
            scored_at=pl.lit(now.isoformat()),
            information=pl.col("information"),
            information_cues=pl.col("information_cues"),
            information_model=pl.col("information_model"),
        )
        .struct.json_encode()
        .alias("importance_factors"),
    )


def stored_information(factors: str | None) -> float | None:
    """The information score recorded in ``importance_factors`` (None: not scored yet)."""
    if not factors:
        return None
    value = json.loads(factors).get("information")
    return None if value is None else float(value)


def significance(importance: float | None, factors: str | None) -> float:
    """What recall ranks on: the last score's ``significance`` (importance without the recency factor) when
    the row was scored, else its stored importance (a row no pass has scored yet)."""
    if factors:
        value = json.loads(factors).get("significance")
        if value is not None:
            return float(value)
    return float(importance or 0.0)


def importance_of(row: dict[str, Any], *, now: datetime, half_life_days: float) -> tuple[float, str]:
    """Score one row (a dict with the columns :func:`importance_frame` reads)."""
    cols = ("content", "tags", "pinned", "access_count", "created_at", "last_accessed_at", "importance_factors")
    df = pl.DataFrame({c: [row.get(c)] for c in cols}, schema=polars_schema(cols))
    out = importance_frame(df, now=now, half_life_days=half_life_days)
    return float(out["importance"][0]), str(out["importance_factors"][0])


def reinforce(confidence: float, *, weight: float = 0.15) -> float:
    """Confidence after one reinforcement (a duplicate write or a supporting episode): moves ``weight`` of
    the remaining distance to 1, so repeated support approaches certainty without reaching it."""
    return min(1.0, confidence + weight * (1.0 - confidence))
