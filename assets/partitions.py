"""What every per-agent asset shares: one dynamic partition per agent id, and the retry policy of a pass.

Agents appear whenever someone writes a memory, so the set is dynamic: ``agent_partitions_sensor`` adds the
new ones (``sensors.py``), and ``make demo`` registers the sample agents directly.

A pass that fails part-way (a commit conflict that outlived the store's own retries, a killed worker) is
safe to run again: it resumes from its cursor and skips what it already wrote. So every pass retries a few
times, backing off, before the run fails (and the run queue's run retries start a new run).
"""

from dagster import Backoff, DynamicPartitionsDefinition, Jitter, RetryPolicy

AGENTS = "agents"

agents = DynamicPartitionsDefinition(name=AGENTS)

PASS_RETRY = RetryPolicy(max_retries=3, delay=5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
