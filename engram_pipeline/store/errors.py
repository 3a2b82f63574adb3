"""Typed errors of the store. Each message says what happened and what to do."""

from __future__ import annotations

from typing import Any


class StoreError(Exception):
    """Base class for errors raised by the memory store."""


class VersionConflict(StoreError):
    """A compare-and-set found the row at another version: re-read it and retry with the current version."""

    def __init__(self, memory_id: str, *, expected: int, current: int | None) -> None:
        self.memory_id = memory_id
        self.expected = expected
        self.current = current
        where = "it no longer exists" if current is None else f"it is at version {current}"
        super().__init__(f"memory {memory_id}: expected version {expected} but {where}; re-read it and retry")


class RestoreConflict(VersionConflict):
    """The row changed after the event that hid it: restoring its pre-image would revert that change."""

    def __init__(self, memory_id: str, *, action: str, hidden_at: int, current: int) -> None:
        VersionConflict.__init__(self, memory_id, expected=hidden_at, current=current)
        self.action = action
        Exception.__init__(
            self,
            f"memory {memory_id}: changed after the {action} that hid it (the {action} left it at version "
            f"{hidden_at}; it is now at version {current}); restoring its pre-image would revert those changes. "
            f"Read it, and to restore it anyway send its current version ({current}) as the expected version",
        )


class MemoryNotFound(StoreError, LookupError):
    def __init__(self, memory_id: str) -> None:
        self.memory_id = memory_id
        super().__init__(f"memory {memory_id!r} does not exist")


class NothingToRestore(StoreError):
    def __init__(self, memory_id: str, *, reason: str | None = None) -> None:
        self.memory_id = memory_id
        why = reason or "it has no audit pre-image from a prune, merge, supersede, archive or delete"
        super().__init__(f"memory {memory_id!r}: nothing to restore; {why}")


class RestoreDuplicate(NothingToRestore):
    """The content of the row to restore is stored again, as another memory: restoring would store it twice."""

    def __init__(self, memory_id: str, *, existing_id: str) -> None:
        self.existing_id = existing_id
        NothingToRestore.__init__(
            self,
            memory_id,
            reason=f"its content is stored again, as memory {existing_id!r} (one row per content); use that "
            f"memory, or delete it and restore this one",
        )


class PlanNotFound(StoreError, LookupError):
    def __init__(self, plan_id: str) -> None:
        self.plan_id = plan_id
        super().__init__(
            f"no corpus-merge plan {plan_id!r}; a dry run of the corpus merge stores one and returns its id"
        )


class EmbedderMismatch(StoreError):
    """``select`` is what to set to open the store with its own embedder (``ENGRAM_EMBEDDER=minilm``), or None
    when no shipped embedder gives its recorded name."""

    def __init__(
        self, uri: str, stored: str, stored_dim: int, given: str, given_dim: int, *, select: str | None = None
    ) -> None:
        self.stored, self.given, self.select = stored, given, select
        fix = f"Set {select}" if select else "Open it with the embedder that built it"
        super().__init__(
            f"the store at {uri} was built with embedder {stored!r} (dimension {stored_dim}); "
            f"refusing to open it with {given!r} (dimension {given_dim}). {fix}, "
            "or re-embed into a new store (engram export, then import with the new embedder)."
        )


class InvalidInput(StoreError, ValueError):
    """Bad input: nothing was written."""


class PlanClosed(InvalidInput):
    """The plan was discarded, or expired when a newer plan was made: it can no longer be applied (nothing was)."""

    def __init__(self, plan_id: str, status: str, note: dict[str, Any] | None = None) -> None:
        self.plan_id = plan_id
        self.status = status
        note = note or {}
        if status == "expired":
            newer = note.get("expired_by", "a newer plan")
            why = (
                f"expired: plan {newer} was made after it, so it no longer says what the store would merge; "
                f"review {newer} and apply that one (or plan again)"
            )
        else:
            who = f" by {note['discarded_by']}" if note.get("discarded_by") else ""
            when = f" at {note['discarded_at']}" if note.get("discarded_at") else ""
            why = f"was {status}{who}{when}; plan again (a dry run) and review the new plan"
        super().__init__(f"corpus-merge plan {plan_id} {why}. Nothing was applied")


class StoreNotFound(StoreError, LookupError):
    """No store at this URI, and the caller asked not to create one."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(
            f"no memory store at {uri}: create one with `engram init` (or `engram --db URI init`, or import "
            "or remember something), or point --db / ENGRAM_DB_URI / ENGRAM_HOME at an existing store"
        )


class UnknownAgent(StoreError, LookupError):
    """The agent has no memories in this store."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(f"unknown agent {agent_id!r}: it has no memories in this store (`engram agents` lists them)")


class ShardCountMismatch(StoreError):
    """The store was built with another shard count than ``ENGRAM_SHARDS``: its agents live in other tables."""

    def __init__(self, uri: str, *, stored: int, given: int) -> None:
        self.uri = uri
        self.stored = stored
        self.given = given
        super().__init__(
            f"the store at {uri} has {stored} shard(s); refusing to open it with ENGRAM_SHARDS={given} (its "
            f"agents' rows are in the tables of {stored} shard(s)). Set ENGRAM_SHARDS={stored}, or re-shard the "
            f"store with `engram migrate --shards {given}` (it reads the recorded count; stop writers first)."
        )


class MigrationInProgress(StoreError):
    """A re-shard of the store started and has not finished: neither layout is complete, so it is not opened."""

    def __init__(self, uri: str, *, source: int, target: int) -> None:
        self.uri = uri
        self.source = source
        self.target = target
        super().__init__(
            f"the store at {uri} is being re-sharded from {source} to {target} shard(s) (or a migration was "
            f"killed); it cannot be used until that finishes. Run `engram migrate --shards {target}` to finish "
            f"it (it resumes where it stopped), then set ENGRAM_SHARDS={target}."
        )
