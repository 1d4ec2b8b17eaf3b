"""Re-deriving a shard's terms when the tokenizing rules or languages change.

What a shard keeps from its records' text depends on the analyzer (``Analyzer.signature``,
recorded in ``meta`` under ``schema.META_FOLDING``): every row's dedup key (``records.norm``)
and the active rows' terms (``records.tokens`` and their documents in ``terms_fts``). A shard
written under other rules (or under none recorded, and holding records) has them derived
again when the process first opens it (``shards.Shards._check``), inside the open's
``BEGIN IMMEDIATE`` transaction, by the functions the write path uses; a second process
opening the shard meanwhile waits for that transaction and then finds the signature current.
Rows, ids, statuses and use counts are untouched; each document keeps its ``continues``
marker (its predecessor's row may be gone), and every scope's change counter moves on, so no
copy of the old terms held in memory anywhere is used again.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from scopemem.core.text import normalize_text
from scopemem.core.words import Analyzer
from scopemem.stores.shared.tokens import index_tokens
from scopemem.stores.sqlite_shared import index, schema

__all__ = ["refold"]

log = logging.getLogger("scopemem.stores.sqlite")

SCOPE_IDS = "SELECT scope_key, sid FROM scopes ORDER BY scope_key"
SCOPE_ROWS = ("SELECT seq, text, keywords, status, tokens != '' FROM records"
              " WHERE scope_key = :scope")
# The scope's documents carrying the marker term (``index.CONTINUES``).
CONTINUING = ("SELECT rowid & 4294967295 FROM terms_fts"
              " WHERE terms_fts MATCH '\"' || :head || :marker || '\"'")
# [[seq, dedup key, tokens or null], ...]: a scope's rows re-derived, one statement. A row
# retired since it was written keeps its terms in ``tokens`` (in no document): re-derived
# too; an empty column (a row scrubbed, or written retired) stays empty.
REFOLD_ROWS = ("WITH r (seq, norm, tokens) AS MATERIALIZED"
               " (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(:rows))"
               " UPDATE records SET norm = r.norm, tokens = ifnull(r.tokens, records.tokens)"
               " FROM r WHERE records.scope_key = :scope AND records.seq = r.seq")
NEXT_GENERATIONS = "UPDATE scopes SET generation = generation + 1"


def refold(conn: Any, analyzer: Analyzer, path: str) -> int:
    """Re-derive the shard's dedup keys and terms under ``analyzer`` unless they follow it
    already, and record its signature; how many rows were re-derived. The caller holds a
    write transaction and has applied the schema."""
    signature = analyzer.signature
    recorded = schema.stored_meta(conn, schema.META_FOLDING)
    if recorded == signature:
        return 0
    scopes = conn.execute(SCOPE_IDS).fetchall()
    continuing = {sid: {seq for (seq,) in conn.execute(
        CONTINUING, {"head": index.prefix(sid), "marker": index.CONTINUES})}
        for _key, sid in scopes}
    index.unpost_all(conn)
    total = 0
    for scope_key, sid in scopes:
        rows = conn.execute(SCOPE_ROWS, {"scope": scope_key}).fetchall()
        changed: list[tuple[int, str, str | None]] = []
        documents: list[tuple[int, list[str], bool]] = []
        for seq, text, keywords, status, holds_terms in rows:
            terms = None
            if status == "active" or holds_terms:
                terms = index_tokens(text, json.loads(keywords), analyzer)
            if status == "active":
                documents.append((seq, terms or [], seq in continuing[sid]))
            changed.append((seq, normalize_text(text),
                            None if terms is None else " ".join(terms)))
        if changed:
            conn.execute(REFOLD_ROWS, {"scope": scope_key,
                                       "rows": json.dumps(changed, ensure_ascii=False)})
        index.post(conn, sid, documents)
        total += len(rows)
    if total:
        conn.execute(NEXT_GENERATIONS)
        index.scrub(conn)
        if recorded is None:  # a shard of a release that recorded no signature
            log.info("sqlite store: %s: re-derived the tokens of %d records (%s)", path,
                     total, signature)
        else:
            # Another process may be using the directory under the recorded languages: it
            # would go on answering from terms this one has just replaced.
            log.warning("sqlite store: %s: re-derived the tokens of %d records (%s), written"
                        " under %s: give every process using this directory the same"
                        " release and memory.languages, or each re-derives it in turn",
                        path, total, signature, recorded)
    schema.set_meta(conn, schema.META_FOLDING, signature)
    return total
