"""What the SQL stores share: the logic between the engine and a database, and the
statements both run.

The SQLite and the PostgreSQL stores differ in their connections and in part of their SQL;
what they do between the engine's decisions and the statements, and the statements they
both run, live here once:

``batches``  driving a write batch through ``engine.plan_write`` in memory (from the rows
             the batch can touch, read in one go) and choosing the evictions from the two
             short least-recently-used reads; the ids a scope mints, the purge's bound
``changes``  the transactions that change a scope (a write, forget, sweep, purge, deleting
             a scope, provenance scrubbing, an import), over each database's ``Tx``
``bumps``    pending use counts: counting them, merging a batch back after a failed save
``tokens``   the terms a record is indexed by (the engine's own, so the prefilter and the
             engine's gate never disagree); ranking's input from the postings read back
``cache``    a worker's copies of large scopes' postings, checked with every retrieval
``counts``   checking the counter rows a host adds, and which scopes a reading selects
``vectors``  the semantic lane's vectors: checks, and the in-process store's shelf of them
``nearest``  the one nearest-vector search, and a worker's copies of scopes' matrices
``calls``    what a store's search, list and mark_used start with
``sql``      the statements both SQL stores run, built from a dialect; a schema version
``dialect``  what a dialect holds: the few things SQLite and PostgreSQL write differently

Nothing here does I/O but through a store's ``Tx``, and nothing here imports a store
(``tests/test_layers.py``).
"""
