"""What every pass asset shares: its partitions (one per agent, or one per shard) and the retry policy of a pass.

Two partition sets, for two scales of work:

- ``shards`` (static, ``"0"`` .. ``"N-1"`` for ``ENGRAM_SHARDS`` = N): the scheduled maintenance. A shard's run
  sweeps every agent in that shard in one run (``lifecycle.sweep``), so a tick costs N runs however many agents
  there are.
- ``agents`` (dynamic, one per agent id): the human-scale flows, reviewing and applying a corpus merge plan or
  an ad-hoc backfill of a few agents. Agents appear whenever someone writes a memory: ``agent_partitions_sensor``
  adds the new ones (``sensors.py``), and ``make demo`` registers the sample agents directly.

A pass that fails part-way (a commit conflict that outlived the store's own retries, a killed worker) is
safe to run again: it resumes from its cursor and skips what it already wrote. So every pass retries a few
times, backing off, before the run fails (and the run queue's run retries start a new run).
"""

from dagster import Backoff, DynamicPartitionsDefinition, Jitter, RetryPolicy, StaticPartitionsDefinition

from engram_pipeline.settings import Settings

AGENTS = "agents"

agents = DynamicPartitionsDefinition(name=AGENTS)


def shard_keys(count: int) -> list[str]:
    """The partition keys of a store of ``count`` shards: the shard numbers.

    >>> shard_keys(3)
    ['0', '1', '2']
    """
    if count < 1:
        raise ValueError(f"a store has at least one shard, not {count} (ENGRAM_SHARDS)")
    return [str(k) for k in range(count)]


def shard_partitions(count: int) -> StaticPartitionsDefinition:
    """The ``shards`` partitions of a store of ``count`` shards."""
    return StaticPartitionsDefinition(shard_keys(count))


# The code location's shard count, from the environment it loads in (the schedules read the same settings).
shards = shard_partitions(Settings.from_env().shards)

PASS_RETRY = RetryPolicy(max_retries=3, delay=5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
