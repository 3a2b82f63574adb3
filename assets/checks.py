"""Asset checks: the store's invariants, checked for the agent right after each pass that could break them.

The invariants are computed by :mod:`engram_pipeline.invariants` (so the API and CLI can run them too); a check
here only names the pass it guards and turns the result into an ``AssetCheckResult`` (severity ERROR, with the
offending rows in its metadata).
"""

import warnings

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetsDefinition,
    MetadataValue,
    asset_check,
)
from dagster._utils.warnings import PreviewWarning

from assets.consolidation_assets import archival
from assets.hygiene_assets import contradictions, corpus_merge_apply
from assets.maintenance_assets import confidence_decay, importance_decay, stm_promotion
from assets.partitions import agents
from assets.resources import EngramStore
from engram_pipeline.invariants import INVARIANTS, InvariantResult

SUPERSEDED = "superseded_rows_have_canonical"
CONTRADICTED = "contradicted_rows_have_partner"
HIDDEN = "hidden_rows_have_audit_pre_image"
VERSIONS = "versions_never_go_backwards"
HELD = "only_held_rows_leave_recall"

# Which invariants each pass could break, so which checks run after it.
GUARDS: list[tuple[AssetsDefinition, tuple[str, ...]]] = [
    (stm_promotion, (HIDDEN, VERSIONS)),
    (importance_decay, (HIDDEN, SUPERSEDED, HELD, VERSIONS)),  # pruning a canonical would strand its duplicates
    (confidence_decay, (HIDDEN, HELD, VERSIONS)),
    (contradictions, (CONTRADICTED, SUPERSEDED, VERSIONS)),
    (corpus_merge_apply, (SUPERSEDED, HIDDEN, VERSIONS)),
    (archival, (HIDDEN, HELD, VERSIONS)),
]


def check_result(result: InvariantResult) -> AssetCheckResult:
    return AssetCheckResult(
        passed=result.passed,
        severity=AssetCheckSeverity.ERROR,
        description=f"{result.violation_count} of {result.checked} rows break {result.name}",
        metadata={
            "checked": MetadataValue.int(result.checked),
            "violations": MetadataValue.int(result.violation_count),
            "first_violations": MetadataValue.json(list(result.violations)),
            **{k: MetadataValue.text(str(v)) for k, v in result.details.items()},
        },
    )


def invariant_check(guarded: AssetsDefinition, invariant: str) -> AssetChecksDefinition:
    """The check of ``invariant`` for the agent partition, after ``guarded`` materializes."""
    compute = INVARIANTS[invariant]

    def _check(context: AssetCheckExecutionContext, engram: EngramStore) -> AssetCheckResult:
        return check_result(compute(engram.open(), context.partition_key))

    # Partitioned checks are a preview feature of Dagster 1.13; they are what lets a check read one agent.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)
        return asset_check(asset=guarded, name=invariant, partitions_def=agents, description=compute.__doc__)(_check)


invariant_checks = [invariant_check(guarded, name) for guarded, names in GUARDS for name in names]
