"""Run one pass over a set of agents (a shard, or any list): the entry point scheduled maintenance calls.

``sweep(store, "ltm_decay", agents, now=now)`` returns a :class:`SweepReport` holding each agent's own report
(the same frozen dataclass the per-agent pass returns), so a caller that wants one agent's figures still has
them. Every pass of the registry (:data:`~engram_pipeline.lifecycle.passes.PASSES`) runs through here (:data:`SWEEPS`
names the one-agent function of each);
the per-agent functions stay the API for one agent and give the same result for that agent as a sweep that includes it.

The agents are grouped by shard (:func:`~engram_pipeline.store.sharding.by_shard`, the store's
``ENGRAM_SHARDS``), and each group runs as one columnar sweep (:data:`COLUMNAR`): one read
of all the group's rows, one vectorised decision, batched compare-and-set commits spanning agents, and one
cursor row per shard and run (:func:`~engram_pipeline.lifecycle._common.sweep_key`), from which a killed sweep
resumes. A sweep with nothing to do commits nothing, as the per-agent passes do. ``health`` (a read) is one
read of every agent's rows, links and plans; ``corpus_merge`` plans (a dry run: applying stays per agent, after
review) and stores the plans of all the agents in one commit; the five consolidation stages are one sweep, as
are the pipeline's other stages.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "We decided to ship on Friday")
>>> _ = store.remember("bob", "Bob's build runs on Tuesdays")
>>> report = sweep(store, "ltm_decay", ["alice", "bob"])
>>> sorted(report.agents), report.totals()["processed"]
(['alice', 'bob'], 2)
>>> store.engine.agents_in_shard(0)
['alice', 'bob']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.lifecycle._gc import fewer_collections
from engram_pipeline.lifecycle.passes import PASSES
from engram_pipeline.model import utcnow
from engram_pipeline.store.sharding import by_shard

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# pass name -> the per-agent function (store, agent_id, *, now=...) -> report, and the columnar sweep over the
# agents of one shard (store, agent_ids, *, now=, run_id=) -> {agent: report}: both from the pass registry
SWEEPS: dict[str, Callable[..., Any]] = {name: p.run for name, p in PASSES.items()}
COLUMNAR: dict[str, Callable[..., dict[str, Any]]] = {name: p.sweep for name, p in PASSES.items()}


@dataclass(frozen=True)
class SweepReport:
    pass_name: str
    now: datetime
    agents: dict[str, Any]  # agent id -> that agent's report

    def totals(self) -> dict[str, int]:
        """The integer fields of the agents' reports, summed (for a pass whose report is flat)."""
        out: dict[str, int] = {}
        for report in self.agents.values():
            fields = asdict(report) if is_dataclass(report) and not isinstance(report, type) else {}
            for name, value in fields.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    out[name] = out.get(name, 0) + value
        return out


def sweep(
    store: MemoryStore,
    pass_name: str,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    run_id: str | None = None,
) -> SweepReport:
    """Run ``pass_name`` over ``agent_ids`` at one ``now`` (default: the current time), one sweep per shard.
    ``run_id`` (say, the Dagster run's) goes into every cursor and audit event the run writes."""
    if pass_name not in COLUMNAR:
        raise ValueError(f"no sweep for pass {pass_name!r}; known: {', '.join(sorted(COLUMNAR))}")
    now = now or utcnow()
    agents: dict[str, Any] = {}
    with fewer_collections():
        for group in by_shard(agent_ids, store.shard_count).values():
            agents.update(COLUMNAR[pass_name](store, group, now=now, run_id=run_id))
    return SweepReport(pass_name, now, dict(sorted(agents.items())))
