"""The write path: ``remember`` and the checked import, one mechanism per module.

=================  ==========================================================================================
``batch``          :func:`~.batch.remember_batch`: a batch of new rows checked and committed as if written one
                   after another (embedding, the judge's calls, the order of the steps below)
``commit``         :class:`~.commit.GroupCommit`: the writers of one process share a batch and its commit
``reads``          the reads before the commit: stored rows by content hash, visible neighbours, rows by id
``cache``          :class:`~.cache.WriteCache`: each agent's rows in memory for those reads, kept fresh
``view``           :class:`~.view.AgentView`: one agent's rows in the cache, and their exact search
``fragments``      :class:`~.fragments.ChangedFragments`: the fragments a catch-up of the cache reads
``checks``         :func:`~.checks.decide_many`: the judge's and the contradiction rules' decisions, batched
``insert``         :func:`~.insert.append_new`: the append of the new rows, racing inserts caught after it
``collapse``       :func:`~.collapse.collapse_many`: near duplicates folded into their stored rows
``compaction``     :func:`~.compaction.after_commit`: the store compacting ``memories`` behind the writes
``bulk``           :func:`~.bulk.write_checked`: the same checks, vectorised, for an import
=================  ==========================================================================================

Below the package: the appends without a listing (:mod:`engram_pipeline.store.appends`, owned by each shard)
and the contradiction marks (:mod:`engram_pipeline.store.marks`, shared with the contradiction pass). How the
write path was measured: ``docs/scale.md``.
"""
