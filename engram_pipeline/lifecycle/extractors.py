"""The hook where a model-based extractor can replace the lexical claim parser in consolidation.

Belief extraction and schema derivation need ``(subject, relation, value)`` claims read from memory text.
By default they come from :func:`engram_pipeline.claims.parse_claims` (fixed relational and copular patterns,
deterministic, no model). A user who wants broader coverage can pass any object with an ``extract_claims``
method to :func:`engram_pipeline.lifecycle.consolidation.consolidate` (``extractor=...``).

The contract is deliberately narrow, so the rest of consolidation (voting, confidence, dedup, links) stays
deterministic and testable whatever the extractor:

- one call per batch of texts, returning one list of :class:`~engram_pipeline.claims.Claim` per text, in order;
- ``subject`` and ``value`` normalised the way the lexical parser does (lowercase, no determiners; the user as
  ``"user"``), so claims from different texts about the same thing compare equal;
- ``relation`` one of ``lives_in``, ``based_in``, ``works_at``, ``prefers``, ``uses``, ``likes``, ``has``,
  ``is`` (others are kept but treated as multi-valued and rendered verbatim);
- ``text`` is the sentence the claim was read from (used to recover the value's original casing).

Example: an LLM extractor::

    class LLMExtractor:
        name = "llm"

        def extract_claims(self, texts):
            answers = my_llm.batch([PROMPT.format(t) for t in texts])  # JSON list of triples per text
            return [[Claim(s, r, v, neg, t) for s, r, v, neg in parse(a)] for a, t in zip(answers, texts)]

    consolidate(store, "agent-1", extractor=LLMExtractor())

An extractor runs inside a batch pass: cache its answers by text if it is slow or paid, because a ``full``
consolidation re-reads every episode.

Dialogue: one agent's memory of a two-person conversation says "you" for the other speaker ("Leo: You still
work at Globex."). An extractor that sets ``reads_listeners = True`` is also given, for each episode, who "you"
is there (``listeners=``, :func:`engram_pipeline.utterances.listeners`); the lexical one does. Any other is
called with the texts alone (:func:`claims_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engram_pipeline.claims import Claim, parse_claims
from engram_pipeline.utterances import listeners

__all__ = ["Extractor", "LexicalExtractor", "claims_of", "default_extractor"]


@runtime_checkable
class Extractor(Protocol):
    """Reads claims from texts: one list of claims per text, in input order."""

    name: str

    def extract_claims(self, texts: Sequence[str]) -> list[list[Claim]]: ...


class LexicalExtractor:
    """The default: the relational and copular patterns of :mod:`engram_pipeline.claims`."""

    name = "lexical"
    reads_listeners = True

    def extract_claims(
        self, texts: Sequence[str], *, listeners: Sequence[str | None] | None = None
    ) -> list[list[Claim]]:
        if listeners is None:
            return [parse_claims(t) for t in texts]
        return [parse_claims(t, who) for t, who in zip(texts, listeners, strict=True)]


def claims_of(extractor: Extractor, texts: Sequence[str]) -> list[list[Claim]]:
    """The claims of one agent's episode ``texts``: with who "you" is in each (the other speaker of a two-person
    conversation) for an extractor that reads it, else from the texts alone."""
    if getattr(extractor, "reads_listeners", False):
        return extractor.extract_claims(texts, listeners=listeners(list(texts)))  # type: ignore[call-arg]
    return extractor.extract_claims(texts)


def default_extractor() -> Extractor:
    return LexicalExtractor()
