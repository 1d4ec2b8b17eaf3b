"""The request bodies of the Memory Worker's data routes, as JSON Schema: the one definition of
what the worker accepts.

Both sides come from here:

- the worker validates every body against ``REQUESTS[path]`` (``validation.py`` compiles
  them with fastjsonschema, and words a refusal from the schema node that failed);
- the served OpenAPI document states the same schemas: its request bodies and the schemas
  they name (``SCHEMAS``) are written into ``openapi.json`` by ``python -m
  scopemem.worker_aiohttp.schema`` (a test checks the shipped file holds them as they are
  here). The rest of the document (responses, summaries) is written in ``openapi.json``.

So a rule changes in one place: a new cap is one keyword here. What JSON Schema cannot state
is checked in ``validation.py`` and said in the schema's ``description``: an imported
record's id names its own scope, and ``/used`` holds at most ``MAX_USED_IDS`` ids in all.

Keys and ids (``ScopeKey``, ``Identifier``) follow ``core.scopes.identifier_problem``: no
whitespace, control or invisible character. JSON Schema has no Unicode categories, so the
characters are listed (``FORBIDDEN_IN_KEYS``, taken from that function's own tests of each
code point; a test checks the list against it over all of Unicode).

Numbers follow JSON Schema: an integer is any number without a fraction, so ``350.0`` is
the integer 350 (``validation.parse_body`` reads it as such).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from scopemem.core.browse import (
    MAX_OFFSET,
    MAX_PAGE,
    MAX_REACH_BATCH,
    MAX_REACHES,
    SCOPE_SORTS,
)
from scopemem.core.counters import COUNTER_NAMES, MAX_DAY, MAX_DELTA, REJECTED_BY
from scopemem.core.porting import MAX_CLOCK_SKEW_MS, MAX_IMPORTED_SEQ, MAX_USE_COUNT
from scopemem.core.records import (
    MAX_BATCH,
    MAX_COUNT_ROWS,
    MAX_EXPORT_PAGE,
    MAX_ID_CHARS,
    MAX_IMPORT_BATCH,
    MAX_IMPORT_INT,
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    MAX_SCOPE_CAP,
    MAX_SCOPES_PAGE,
    MAX_SEQ,
    MAX_SOURCE_CHARS,
    MAX_STATS_SCOPES,
    MAX_TEXT_CHARS,
    MAX_USED_IDS,
    MAX_USED_SCOPES,
    SCRUBBED_STATUSES,
    Kind,
    Source,
    Status,
)
from scopemem.core.scopes import MAX_SCOPE_KEY_CHARS
from scopemem.stores.shared.vectors import (
    MAX_DIMENSIONS,
    MAX_MISSING_PAGE,
    MAX_MODEL_CHARS,
    MAX_PUT_VECTORS,
    MODEL_PATTERN,
    VECTOR_PATTERN,
)

Schema = dict[str, Any]

#: The code points a scope key or an id may not hold, as inclusive ranges: whitespace,
#: control characters and invisible ones (``core.scopes.identifier_problem``). Surrogates are
#: left out: no JSON text holds a lone one (``validation.parse_body`` refuses it).
FORBIDDEN_IN_KEYS: Final = (
    (0x0000, 0x0020), (0x007F, 0x00A0), (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605),
    (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2),
    (0x115F, 0x1160), (0x1680, 0x1680), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2000, 0x200F),
    (0x2028, 0x202F), (0x205F, 0x206F), (0x3000, 0x3000), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

#: A key or id: one or more characters, none of them forbidden (the characters themselves,
#: not escapes, so every regular expression dialect reads the class alike).
_KEY_CHAR = "[^" + "".join(
    chr(first) if first == last else f"{chr(first)}-{chr(last)}"
    for first, last in FORBIDDEN_IN_KEYS) + "]"
KEY_PATTERN: Final = "^" + _KEY_CHAR + "+$"
#: A ``supersedes`` or ``restates``: empty (no pointer) or a memory id of any scope
#: (``core.scopes.pointer_problem``, which words the refusal).
POINTER_PATTERN: Final = "^(mem:" + _KEY_CHAR + "+:[0-9]+)?$"

#: A marker's counter: ``rejected:`` and the marker's name (``core.counters``).
MARKER_COUNTER_PATTERN: Final = "^" + REJECTED_BY + "[A-Za-z0-9_.-]{1,64}$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def integer(low: int, high: int, **more: Any) -> Schema:
    return {"type": "integer", "minimum": low, "maximum": high, **more}


#: A string of a body's known fields holds no NUL character: PostgreSQL cannot keep one,
#: so no store takes it (keys and ids forbid every control character).
NO_NUL_PATTERN: Final = "^[^\u0000]*$"


def string(*, min_length: int = 0, max_length: int | None = None, **more: Any) -> Schema:
    """A string field of a body (every string but keys and ids): no NUL unless ``more``
    gives a pattern of its own."""
    schema: Schema = {"type": "string", "pattern": NO_NUL_PATTERN}
    if min_length:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return {**schema, **more}


def array(items: Schema, most: int, **more: Any) -> Schema:
    return {"type": "array", "maxItems": most, "items": items, **more}


def body(required: list[str], properties: dict[str, Schema], **more: Any) -> Schema:
    """An object; other keys are allowed and ignored (a newer client's fields)."""
    return {"type": "object", "required": required, "properties": properties, **more}


_KEY_RULE = "no whitespace, control or invisible characters (zero width, bidi controls, TAG"
_KEY_RULE += " characters, variation selectors: the pattern lists them)"
_TIME = integer(0, MAX_IMPORT_INT, description="Epoch milliseconds")
_IMPORT_TIME = integer(0, MAX_IMPORT_INT, description=(
    f"Epoch milliseconds, no later than {MAX_CLOCK_SKEW_MS // 60_000} minutes after the"
    " worker's clock"))
_KEYWORDS = array(string(max_length=MAX_KEYWORD_CHARS), MAX_KEYWORDS)
_CONFIDENCE = {"type": "number", "minimum": 0, "maximum": 1}

#: The schemas the request bodies name (``#/components/schemas/<name>``).
SCHEMAS: Final[dict[str, Schema]] = {
    "ScopeKey": string(min_length=1, max_length=MAX_SCOPE_KEY_CHARS, pattern=KEY_PATTERN,
                       description="Opaque, platform-namespaced scope (org:acme,"
                                   f" user:slack:U1); {_KEY_RULE}"),
    "Identifier": string(min_length=1, max_length=MAX_ID_CHARS, pattern=KEY_PATTERN,
                         description=f"A memory id, mem:<scopeKey>:<n>; {_KEY_RULE}"),
    "Kind": {"type": "string", "enum": [kind.value for kind in Kind]},
    "Source": {"type": "string", "enum": [source.value for source in Source],
               "description": "Who stated the record: a person (remember) or the extractor"
                              " (reflection). A reflection candidate's supersedes never"
                              " retires a human record. Absent means reflection."},
    "Candidate": body(["kind", "text", "sourceThreadKey"], {
        "kind": ref("Kind"),
        "text": string(min_length=1, max_length=MAX_TEXT_CHARS),
        "sourceThreadKey": string(min_length=1, max_length=MAX_SOURCE_CHARS),
        "sourceRunId": string(max_length=MAX_SOURCE_CHARS),
        "keywords": _KEYWORDS,
        "confidence": _CONFIDENCE,
        "supersedes": string(max_length=MAX_ID_CHARS, pattern=POINTER_PATTERN,
                             description="Id of an active record this one replaces"),
        "restates": string(max_length=MAX_ID_CHARS, pattern=POINTER_PATTERN,
                           description="Id of an active record this one says again"),
        "source": ref("Source"),
    }),
    "ImportRecord": body(["id", "scopeKey", "kind", "text", "sourceThreadKey", "createdAt"], {
        "id": string(min_length=1, max_length=MAX_ID_CHARS,
                     description=f"mem:<its scopeKey>:<n>, n from 1 to {MAX_IMPORTED_SEQ} without a"
                                 " leading zero: a record is imported into its own scope"
                                 " only"),
        "scopeKey": ref("ScopeKey"),
        "kind": ref("Kind"),
        "text": string(max_length=MAX_TEXT_CHARS,
                       description="Empty only for a forgotten record, or a swept one the"
                                   " retention scrubbed (stored scrubbed)"),
        "keywords": _KEYWORDS,
        "sourceThreadKey": string(),
        "sourceRunId": string(),
        "createdAt": _IMPORT_TIME,
        "lastUsedAt": _IMPORT_TIME,
        "useCount": integer(0, MAX_USE_COUNT),
        "confidence": _CONFIDENCE,
        "supersedes": string(max_length=MAX_ID_CHARS, pattern=POINTER_PATTERN),
        "restates": string(max_length=MAX_ID_CHARS, pattern=POINTER_PATTERN),
        "status": {"type": "string", "enum": [status.value for status in Status],
                   "default": Status.ACTIVE.value},
        "source": ref("Source"),
    }, **{"if": {"required": ["status"], "properties": {
        "status": {"enum": sorted(status.value for status in SCRUBBED_STATUSES)}}},
          "else": {"properties": {"text": {"minLength": 1}}}}),
    "Vector": string(min_length=8, max_length=4 * -(-4 * MAX_DIMENSIONS // 3),
                     pattern=VECTOR_PATTERN, description=(
                         f"Base64 of 1 to {MAX_DIMENSIONS} little-endian float32 values,"
                         " finite and not all zero (a whole number of them: the decoded"
                         " length is a multiple of 4 bytes); stored normalized to unit"
                         " length")),
    "EmbeddingModel": string(min_length=1, max_length=MAX_MODEL_CHARS,
                             pattern=MODEL_PATTERN,
                             description="<embedder>/<model> (memory.embeddings): a"
                                         " scope's vectors of another model are not read"),
    "CounterName": {"type": "string", "anyOf": [
        {"enum": list(COUNTER_NAMES)}, {"pattern": MARKER_COUNTER_PATTERN}],
        "description": "A counter name (docs/stats.md), or rejected:<marker> (a marker name of"
                       " letters, digits, _, . and -, at most 64)"},
}

_SCOPE_KEY = ref("ScopeKey")
_LIMIT = integer(1, MAX_LIMIT)
_QUERY = string(max_length=MAX_QUERY_CHARS)
_OFFSET = integer(0, MAX_OFFSET, default=0)
_PAGE = integer(1, MAX_PAGE, default=50)

#: Each data route's request body.
REQUESTS: Final[dict[str, Schema]] = {
    "/retrieve": body(["scopeKey", "query", "limit"], {
        "scopeKey": _SCOPE_KEY,
        "query": _QUERY,
        "limit": _LIMIT,
        "bump": {"type": "boolean", "default": True,
                 "description": "Count the returned records as used (the seed's behaviour,"
                                " the default). A client that counts only what it showed"
                                " sends false and reports those through /used."},
    }),
    "/write": body(["scopeKey", "records"], {
        "scopeKey": _SCOPE_KEY,
        "records": array(ref("Candidate"), MAX_BATCH),
        "cap": integer(1, MAX_SCOPE_CAP, description=(
            "Active records the scope may hold; the server's default when omitted. The"
            " server bounds it: never above its default cap, never below the floor its"
            " operator set (memory.min_records_per_scope), so a client may only lower the"
            " cap down to that floor")),
    }),
    "/list": body(["scopeKey", "limit"], {
        "scopeKey": _SCOPE_KEY,
        "limit": _LIMIT,
        "query": {**_QUERY, "description": "Keep only whole-token hits in text or keywords"},
        "kind": ref("Kind"),
    }),
    "/forget": body(["scopeKey", "id"], {"scopeKey": _SCOPE_KEY, "id": ref("Identifier")}),
    "/sweep": body(["scopeKey"], {"scopeKey": _SCOPE_KEY,
                                  "dryRun": {"type": "boolean", "default": False}}),
    "/delete-scope": body(["scopeKey"], {"scopeKey": _SCOPE_KEY}),
    "/scrub-provenance": body(["scopeKey", "personKey"], {
        "scopeKey": _SCOPE_KEY,
        "personKey": {**SCHEMAS["ScopeKey"], "description": (
            "The person's own scope key (user:slack:U0123): a thread key or run id of the"
            " scope naming their id (its last segment) as a whole token has it replaced by"
            " 'removed'")},
    }),
    "/purge": body([], {}),
    "/used": body(["used"], {
        "used": array(body(["scopeKey", "ids"], {
            "scopeKey": _SCOPE_KEY,
            "ids": array(ref("Identifier"), MAX_USED_IDS),
        }), MAX_USED_SCOPES, description=f"At most {MAX_USED_IDS} ids in all."),
    }),
    "/scopes": body(["limit"], {
        "after": {**SCHEMAS["ScopeKey"], "description": "Answer only the keys sorted after"
                  " this one (the last key of the previous page)"},
        "limit": integer(1, MAX_SCOPES_PAGE),
    }),
    "/export": body(["scopeKey", "limit"], {
        "scopeKey": _SCOPE_KEY,
        "after": integer(0, MAX_SEQ, default=0, description=(
            "Answer only records whose seq (the n of mem:<scope>:<n>) is above this: the"
            " last seq of the previous page")),
        "limit": integer(1, MAX_EXPORT_PAGE),
    }),
    "/import": body(["records"], {
        "records": array(ref("ImportRecord"), MAX_IMPORT_BATCH, description=(
            "A record whose id its scope holds already is skipped (a re-import adds"
            " nothing). Nothing is evicted. A forgotten record is stored scrubbed. Each"
            " scope is one transaction. Each record is screened as a write is (secrets"
            " redacted, a fact the status gate refuses stored as swept) and stored as"
            " reflection-sourced.")),
    }),
    "/counts": body(["counts"], {
        "counts": array(body(["scopeKey", "day", "name", "value"], {
            "scopeKey": _SCOPE_KEY,
            "day": integer(0, MAX_DAY, description="The UTC day, counted in days since the"
                                                   " epoch"),
            "name": ref("CounterName"),
            "value": integer(1, MAX_DELTA),
        }), MAX_COUNT_ROWS),
    }),
    "/stats": body(["since"], {
        "scopeKey": _SCOPE_KEY,
        "scopeKeys": array(_SCOPE_KEY, MAX_STATS_SCOPES),
        "prefix": {**SCHEMAS["ScopeKey"], "description": "Only scopes whose key starts with"
                   " it (repo: for every repository scope)"},
        "since": integer(0, MAX_IMPORT_INT, description=(
            "Epoch milliseconds: the counters of the UTC day holding it and later (0: every"
            " day kept)")),
    }, **{"not": {"required": ["scopeKey", "scopeKeys"],
                  "description": "scopeKey or scopeKeys, not both"}}),
    # The semantic lane (``vectors.py``).
    "/vectors-missing": body(["scopeKey", "model", "limit"], {
        "scopeKey": _SCOPE_KEY,
        "model": ref("EmbeddingModel"),
        "limit": integer(1, MAX_MISSING_PAGE),
    }),
    "/put-vectors": body(["scopeKey", "model", "vectors"], {
        "scopeKey": _SCOPE_KEY,
        "model": ref("EmbeddingModel"),
        "vectors": array(body(["id", "vector"], {"id": ref("Identifier"),
                                                 "vector": ref("Vector")}),
                         MAX_PUT_VECTORS, description=(
                             "All of one number of dimensions, that of the scope's vectors"
                             " of the model when it has some. An id that is not an active"
                             " record of the scope keeps nothing.")),
    }),
    "/nearest": body(["scopeKey", "model", "vector", "limit", "floor"], {
        "scopeKey": _SCOPE_KEY,
        "model": ref("EmbeddingModel"),
        "vector": {**ref("Vector"), "description": "The query's vector, of the dimensions"
                   " of the scope's vectors of the model when it has some"},
        "limit": integer(0, MAX_LIMIT),
        "floor": {"type": "number", "minimum": -1, "maximum": 1},
        "include": array(ref("Identifier"), MAX_LIMIT, description=(
            "Records answered with their cosine whatever it is (after the others), when"
            " they have a vector of the model")),
    }),
    # Browsing (``browsing.py``).
    "/scope-page": body([], {
        "kind": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                 "description": "Only scopes of this kind (the key's part before its colon)"},
        "sort": {"type": "string", "enum": list(SCOPE_SORTS), "default": "key"},
        "descending": {"type": "boolean", "default": False},
        "offset": _OFFSET,
        "limit": _PAGE,
    }),
    "/record-page": body(["scopeKey"], {
        "scopeKey": _SCOPE_KEY,
        "kind": ref("Kind"),
        "status": {"type": "string", "enum": [status.value for status in Status]},
        "source": ref("Source"),
        "offset": _OFFSET,
        "limit": _PAGE,
    }),
    "/record-history": body(["scopeKey", "id"], {"scopeKey": _SCOPE_KEY,
                                                 "id": ref("Identifier")}),
    "/count-totals": body(["kind"], {
        "kind": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                 "description": "The scope kind whose scopes' counters are summed"},
        "sinceDay": integer(0, 2**31 - 1, default=0, description=(
            "The first UTC day summed (days since the epoch)")),
    }),
    "/log-reaches": body(["reaches"], {
        "reaches": array(body(["recordId", "scopeKey", "runId", "threadKey", "atMs"], {
            "recordId": ref("Identifier"),
            "scopeKey": _SCOPE_KEY,
            "runId": string(max_length=MAX_SOURCE_CHARS),
            "threadKey": string(max_length=MAX_SOURCE_CHARS),
            "atMs": _TIME,
        }), MAX_REACH_BATCH, description="Each record id names a record of its scopeKey"),
    }),
    "/reaches": body([], {
        "recordId": ref("Identifier"),
        "run": string(min_length=1, max_length=MAX_SOURCE_CHARS,
                      description="A run id or a thread key"),
        "limit": integer(1, MAX_REACHES, default=100),
    }, **{"not": {"required": ["recordId", "run"],
                  "description": "recordId or run, not both"}}),
}


def document(base: Schema) -> Schema:
    """The OpenAPI document ``base`` with its request bodies and their schemas from here."""
    doc: Schema = json.loads(json.dumps(base))
    for path, schema in REQUESTS.items():
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"][
            "schema"] = schema
    doc["components"]["schemas"].update(SCHEMAS)
    return doc


def render(doc: Schema) -> str:
    """The document as the shipped file holds it."""
    return json.dumps(doc, indent=2, ensure_ascii=True) + "\n"


SHIPPED: Final = Path(__file__).with_name("openapi.json")


def main() -> None:
    """Write the request schemas into the shipped ``openapi.json``."""
    SHIPPED.write_text(render(document(json.loads(SHIPPED.read_text("utf-8")))), "utf-8")
    sys.stdout.write(f"wrote {SHIPPED}\n")


if __name__ == "__main__":
    main()
