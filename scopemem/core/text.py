"""Pure text primitives shared by every part of scopemem: the size estimate, and what makes
a stored field safe to render inside a prompt.

Everything here is deterministic, stdlib-only and free of I/O, so the same
behaviour holds in the scorer, in every store backend and in the renderer:

* :func:`tokenize` / :func:`distinct_tokens` - the single word tokenizer used for
  keyword matching, and :func:`normalize_text`, the dedup key for record text
  (both defined in :mod:`scopemem.core.words`, with the folding rules).
* :func:`sanitize_field` - makes a stored field safe to place inside the
  rendered memory block of a prompt; :func:`strip_invisible` is its first step,
  which redaction (:mod:`scopemem.core.redaction`) shares.
* :func:`estimate_tokens` - the cheap size estimate the injection budget uses.

Secrets are another matter: :mod:`scopemem.core.secret_rules` says what one looks like
(``redact_secrets``), :mod:`scopemem.core.redaction` how a rule is run and recorded.
"""

from __future__ import annotations

import datetime
import re

from scopemem.core.words import distinct_tokens, normalize_text, tokenize

__all__ = [
    "distinct_tokens",
    "encodable",
    "estimate_tokens",
    "format_utc",
    "is_bearer_token",
    "is_text",
    "normalize_text",
    "sanitize_field",
    "strip_invisible",
    "tokenize",
]

# ---------------------------------------------------------------------------
# Tokenizing and normalising live in ``words``; they are re-exported here, where every
# caller has always found them.
# ---------------------------------------------------------------------------

def estimate_tokens(text: str) -> int:
    """Estimate the model-token cost of ``text`` as ``ceil(len(text) / 4)``.

    Roughly four characters per token is a deliberately simple, provider-neutral
    heuristic for the injection budget; it needs no tokenizer dependency. Length
    is counted in code points.
    """
    return -(-len(text) // 4)


# ---------------------------------------------------------------------------
# Sanitising a field for the prompt
# ---------------------------------------------------------------------------
#
# Policy: every control character (Unicode category Cc, i.e. U+0000-U+001F,
# U+007F, U+0080-U+009F) plus U+2028/U+2029 is neutralised. Those that are
# whitespace or line boundaries (tab, LF, VT, FF, CR, the information separators
# U+001C-U+001F, NEL U+0085, LINE/PARAGRAPH SEPARATOR) become a space so words on
# either side stay apart; the remaining controls are dropped outright. This set
# is a superset of both the Unicode mandatory line breaks (UAX #14 classes BK,
# CR, LF, NL) and Python's str.splitlines() boundaries, so no reader of the
# prompt can see a second line inside one field.
#
# Invisible characters are dropped too: text a person reviewing the prompt cannot
# see must not reach the model. That is every format character (category Cf: zero
# width space, word joiner, BOM, soft hyphen, the bidi embeddings, overrides,
# isolates and marks, the invisible math operators, ...) and the whole TAG block
# U+E0000-U+E007F, whose characters mirror ASCII invisibly ("ASCII smuggling").
# Two kinds of Cf are kept:
#
# * the prepended concatenation marks (Arabic number signs U+0600-U+0605, end of
#   ayah U+06DD, U+08E2, Syriac U+070F, U+0890-U+0891, Kaithi U+110BD, U+110CD)
#   and the Egyptian hieroglyph format controls U+13430-U+1343F: they are drawn,
#   or arrange signs that are, and they belong to the text;
# * ZERO WIDTH NON-JOINER and ZERO WIDTH JOINER (U+200C, U+200D), which Persian,
#   the Indic scripts and emoji sequences need, but only one at a time between two
#   visible non-ASCII characters (a ZWNJ inside a Persian word, a ZWJ between two
#   emoji or after a virama). Anywhere else (next to ASCII or a space, at an end,
#   in runs) they carry nothing a reader sees and are dropped, which also breaks
#   the zero-width binary encodings that hide text in runs of them.
#
# A literal table keeps the import cheap (a scan of every code point costs about
# 0.3 s); tests/core/test_text.py scans the running Python's Unicode database and
# proves the tables complete. Entries unassigned in an older Unicode are harmless.

_SPACE = " "


def _build_control_table() -> dict[int, str | None]:
    table: dict[int, str | None] = {}
    for cp in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)):
        table[cp] = _SPACE if chr(cp).isspace() else None
    table[0x2028] = _SPACE
    table[0x2029] = _SPACE
    return table


#: Code points ``sanitize_field`` removes: every format character (Cf) but the kept ones
#: (``KEPT_FORMAT_RANGES``, ``JOINERS``), and the TAG block (assigned or not).
INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x061C, 0x061C),  # arabic letter mark (bidi)
    (0x180E, 0x180E),  # mongolian vowel separator
    (0x200B, 0x200B),  # zero width space
    (0x200E, 0x200F),  # left-to-right / right-to-left mark (bidi)
    (0x202A, 0x202E),  # bidi embeddings, pop, overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0xFEFF, 0xFEFF),  # zero width no-break space (BOM)
    (0xFFF9, 0xFFFB),  # interlinear annotation anchor / separator / terminator
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE007F),  # TAG characters
)
#: The format characters that are drawn or structure a script, so are rendered as they are.
KEPT_FORMAT_RANGES: tuple[tuple[int, int], ...] = (
    (0x0600, 0x0605), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
    (0x08E2, 0x08E2), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
)
#: ZWNJ and ZWJ: kept only one at a time between two visible non-ASCII characters.
JOINERS = "\u200c\u200d"
#: Every code point whose compatibility decomposition (NFKD, so NFKC too) holds ``<``,
#: ``>``, ``&`` or ``/``: fullwidth and small forms, the "a/c"-style symbols, and NOT
#: LESS-THAN / NOT GREATER-THAN (``<`` or ``>`` plus a combining overlay under NFD).
#: ``sanitize_field`` writes each as a character reference (``&#xFF1C;``), so no
#: normalisation of the rendering can produce a bracket or a fence.
LOOKALIKES: tuple[int, ...] = (
    0x2100, 0x2101, 0x2105, 0x2106,  # account of, addressed to the subject, care of, cada una
    0x226E, 0x226F,  # not less-than, not greater-than
    0xFE60, 0xFE64, 0xFE65,  # small ampersand, less-than, greater-than
    0xFF06, 0xFF0F, 0xFF1C, 0xFF1E,  # fullwidth ampersand, solidus, less-than, greater-than
)


def _build_render_table() -> dict[int, str | None]:
    table = _build_control_table()
    for first, last in INVISIBLE_RANGES:
        table.update(dict.fromkeys(range(first, last + 1)))
    return table


_RENDER_TABLE = _build_render_table()
_LOOKALIKE_TABLE = {cp: f"&#x{cp:X};" for cp in LOOKALIKES}
_LOOKALIKE_RE = re.compile("[" + "".join(map(chr, LOOKALIKES)) + "]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# A joiner not alone between two visible non-ASCII characters (the lookalikes render as
# ASCII references, so they count as ASCII here).
_VISIBLE_NON_ASCII = "[^\\x00-\\x7f\\s" + JOINERS + "".join(map(chr, LOOKALIKES)) + "]"
_STRAY_JOINER_RE = re.compile(
    f"(?<!{_VISIBLE_NON_ASCII})[{JOINERS}]|[{JOINERS}](?!{_VISIBLE_NON_ASCII})")


def is_bearer_token(value: str) -> bool:
    """Whether ``value`` may be a bearer token: non-empty printable ASCII without spaces
    (U+0021-U+007E), so it goes into an ``Authorization`` header as it is."""
    return bool(value) and all(0x21 <= ord(char) <= 0x7E for char in value)


def is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8: it holds no lone surrogate."""
    return value.isascii() or _SURROGATE_RE.search(value) is None


def encodable(value: str) -> str:
    """``value`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    A lone surrogate reaches a ``str`` only from ``surrogateescape`` data or a JSON
    ``\\ud800`` escape; a store or the wire refuses the whole text for one, so a writer
    replaces it first."""
    if value.isascii():
        return value
    return _SURROGATE_RE.sub("\ufffd", value)


#: What rendering removes (rather than turns into a space): the controls that are not
#: whitespace and the invisible characters.
_DROP_TABLE = {cp: None for cp, replacement in _RENDER_TABLE.items() if replacement is None}
_ASCII_DROP_RE = re.compile("[" + "".join(chr(cp) for cp in _DROP_TABLE if cp < 0x80) + "]")
_WHITESPACE_TABLE = {cp: _SPACE for cp, replacement in _RENDER_TABLE.items() if replacement}


def strip_invisible(value: str) -> str:
    """``value`` without the characters its rendering removes (steps 1 and 2 of
    :func:`sanitize_field` for what they drop): controls that are not whitespace, the
    invisible characters of :data:`INVISIBLE_RANGES` and the stray joiners. Whitespace
    stays as it is. Redaction applies it first, so a secret split by a zero width space
    or a soft hyphen is seen whole, as the prompt would show it."""
    if value.isascii():  # only controls to drop: a search is cheaper than a translation
        if value.isprintable():  # no control at all (a test, cheaper than the search)
            return value
        return _ASCII_DROP_RE.sub("", value) if _ASCII_DROP_RE.search(value) else value
    text = value.translate(_DROP_TABLE)
    if "\u200c" in text or "\u200d" in text:
        text = _STRAY_JOINER_RE.sub("", text)
    return text


def sanitize_field(value: str) -> str:
    """Make one stored field safe to render as a single bullet inside the prompt.

    Memory is untrusted data (it may have been distilled from a poisoned
    transcript), so a field must never be able to add a line, forge a turn such
    as ``SYSTEM:``, emit markup such as the ``</background_memory>`` fence (as it
    is, or as a lookalike that Unicode normalisation folds into it), or carry text
    a person cannot see. Steps, in order:

    1. Controls: whitespace-like control characters and line separators (tab,
       LF, VT, FF, CR, U+001C-U+001F, U+0085, U+2028, U+2029) become a space;
       every other control character (the rest of U+0000-U+001F, U+007F and
       U+0080-U+009F) is removed.
    2. Invisible characters (:data:`INVISIBLE_RANGES`) are removed: format
       characters such as the zero-width space, word joiner and BOM, every bidi
       control (embeddings, overrides, isolates, LRM/RLM/ALM), and the TAG
       characters U+E0000-U+E007F. ZWNJ and ZWJ survive only one at a time
       between two visible non-ASCII characters (Persian words, Indic conjuncts,
       emoji sequences); the visible format characters of
       :data:`KEPT_FORMAT_RANGES` stay.
    3. Lone surrogates (only possible in strings built from ``surrogateescape``
       data or JSON ``\\ud800`` escapes) become U+FFFD, so the rendered prompt is
       always encodable as UTF-8.
    4. Whitespace runs (any :meth:`str.isspace` character) collapse to one space
       and the ends are trimmed.
    5. HTML-style escaping: ``&`` -> ``&amp;`` first, then ``<`` -> ``&lt;`` and
       ``>`` -> ``&gt;``, then every :data:`LOOKALIKES` character (``＜``, ``﹤``,
       ``／``, ``＆``, ``℅``, ``≮``, ...) -> its hexadecimal character reference
       (``&#xFF1C;``). Escaping ``&`` first makes the encoding lossless, so a
       literal ``&lt;`` in the data renders as ``&amp;lt;`` and can never look
       the same as an escaped ``<``.

    The result contains no newline or other control character, no invisible
    character, no ``<`` or ``>``, and none appears when it is normalised (NFC,
    NFD, NFKC or NFKD). The renderer writes the fence lines itself, never through
    this function, so they remain the only real delimiters. Stored text is never
    changed; only its rendering is.
    """
    text = strip_invisible(value).translate(_WHITESPACE_TABLE)
    lookalikes = False
    if not text.isascii():
        text = _SURROGATE_RE.sub("\ufffd", text)
        lookalikes = _LOOKALIKE_RE.search(text) is not None
    text = " ".join(text.split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.translate(_LOOKALIKE_TABLE) if lookalikes else text



def format_utc(ms: object, pattern: str) -> str:
    """A stored time (milliseconds since the epoch) as UTC text in ``pattern``. A value no
    calendar holds (past year 9999, before year 1, not an integer: a row written into a
    store by hand) is shown as its number, sanitized, rather than failing the rendering."""
    if isinstance(ms, int) and not isinstance(ms, bool):
        try:
            return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime(pattern)
        except (OverflowError, OSError, ValueError):
            pass
    return sanitize_field(str(ms))
