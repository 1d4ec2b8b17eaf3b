"""What the SQL stores share: the logic between the engine and a database, in no dialect.

The SQLite and the PostgreSQL stores differ in their connections and their SQL; what they
do between the engine's decisions and the statements is the same and lives here once:

``batches``  driving a write batch through ``engine.plan_write`` in memory (from the rows
             the batch can touch, read in one go) and choosing the evictions from the two
             short least-recently-used reads; the ids a scope mints, the purge's bound
``bumps``    pending use counts: counting them, merging a batch back after a failed save
``tokens``   the terms a record is indexed by (the engine's own, so the prefilter and the
             engine's gate never disagree); ranking's input from the postings read back
``cache``    a worker's copies of large scopes' postings, checked with every retrieval

Nothing here does I/O.
"""
