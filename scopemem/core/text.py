"""Pure text primitives shared by every part of scopemem.

Everything here is deterministic, stdlib-only and free of I/O, so the same
behaviour holds in the scorer, in every store backend and in the renderer:

* :func:`tokenize` / :func:`distinct_tokens` - the single word tokenizer used for
  keyword matching, and :func:`normalize_text`, the dedup key for record text
  (both defined in :mod:`scopemem.core.words`, with the folding rules).
* :func:`sanitize_field` - makes a stored field safe to place inside the
  rendered memory block of a prompt.
* :func:`redact_secrets` - strips credential-shaped substrings before text is
  sent to a model or persisted.
* :func:`estimate_tokens` - the cheap size estimate the injection budget uses.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from scopemem.core.words import distinct_tokens, normalize_text, tokenize

__all__ = [
    "REDACTION_KINDS",
    "Stage",
    "distinct_tokens",
    "encodable",
    "estimate_tokens",
    "normalize_text",
    "key_value_pattern",
    "key_value_replacement",
    "redact_as_rendered",
    "redact_secrets",
    "redaction_placeholder",
    "redaction_stages",
    "removed_part",
    "sanitize_field",
    "secret_free_keywords",
    "strip_invisible",
    "substitution",
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


# ---------------------------------------------------------------------------
# Secret redaction
# ---------------------------------------------------------------------------
#
# Design notes (these are what make the function linear-time and idempotent):
#
# * Every pattern starts with a literal or near-literal prefix ("sk-", "-----BEGIN",
#   "://", a key word, ...). After it, an unbounded part either cannot fail once
#   it has scanned (a trailing character class), or scans a run that no other
#   attempt scans again (the prefix sits behind a word boundary, so attempts
#   cannot start inside the run); everything else has an explicit upper bound.
#   With Python's backtracking engine that keeps the total work linear in the
#   input. The PEM rule is a small hand-written scan for the same reason.
# * Token-shaped secrets are matched only as whole runs of token characters
#   ``[A-Za-z0-9_-]`` (look-behind and look-ahead on that class). A placeholder
#   starts with "[" and ends with "]", which are not token characters, so
#   replacing one run never changes whether a neighbouring run is a match.
# * Rules that keep a key name and replace only its value refuse a value that is
#   already a placeholder; the key part is an atomic group so backtracking cannot
#   move the value start past that check. Together these make
#   redact_secrets(redact_secrets(x)) equal redact_secrets(x).

_PLACEHOLDER_PREFIX = "[REDACTED:"

#: Every ``kind`` that can appear in a ``[REDACTED:<kind>]`` placeholder.
REDACTION_KINDS: tuple[str, ...] = (
    "private_key",
    "slack_webhook",
    "url_password",
    "anthropic_key",
    "openai_key",
    "github_token",
    "gitlab_token",
    "slack_token",
    "aws_access_key_id",
    "google_api_key",
    "stripe_key",
    "jwt",
    "npm_token",
    "pypi_token",
    "huggingface_token",
    "digitalocean_token",
    "vault_token",
    "age_secret_key",
    "databricks_token",
    "shopify_token",
    "google_oauth_secret",
    "linear_key",
    "authorization",
    "bearer_token",
    "aws_secret_key",
    "credential",
)


def redaction_placeholder(kind: str) -> str:
    """Return the placeholder that replaces a secret of the given ``kind``."""
    return f"{_PLACEHOLDER_PREFIX}{kind}]"


# A value that must be left alone: an existing placeholder (idempotence) or a
# plain environment-variable reference such as $DB_PASSWORD / ${DB_PASSWORD},
# which names a secret without containing it.
_SKIP_VALUE = r"(?![\"'`]?(?:\[REDACTED:|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(?:[\s'\"`]|$)))"

# --- PEM private keys -------------------------------------------------------

_PEM_LABEL = r"(?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY(?: BLOCK)?-----"
_PEM_BEGIN_RE = re.compile(r"-----BEGIN " + _PEM_LABEL)
_PEM_END_RE = re.compile(r"-----END " + _PEM_LABEL)
# Characters that may appear between the armour lines: base64, whitespace,
# RFC 1421 headers ("Proc-Type: 4,ENCRYPTED"), and backslashes from a key that
# was pasted as an escaped one-line string. A dash is allowed unless it starts
# the END line.
_PEM_BODY_RE = re.compile(r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----END ))*")
# For a key with no END line (truncated output, a half-pasted key) only the
# lines that look like key material are removed: header lines and whole base64
# chunks of realistic length, so prose that follows survives.
_PEM_TAIL_RE = re.compile(
    r"(?:(?:\s|\\n|\\r)+"
    r"(?:[A-Za-z0-9+/=]{16,}(?=[\s\\]|$)|(?:Proc-Type|DEK-Info|Comment):[^\r\n]{0,200}))*"
)


def _match_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """End of ``pattern`` matched at ``pos`` (patterns here can match empty)."""
    match = pattern.match(text, pos)
    return match.end() if match else pos


def _redact_pem(text: str, found: list[str] | None) -> str:
    if "-----BEGIN " not in text:
        return text
    out: list[str] = []
    pos = 0
    # End of the last body scan that found no END line. Body characters are
    # recognised without regard to where the scan started, so a later BEGIN
    # inside that stretch would stop at the same place: skip the rescan (this is
    # what keeps a run of unterminated headers linear).
    unterminated_until = -1
    placeholder = redaction_placeholder("private_key")
    while (begin := _PEM_BEGIN_RE.search(text, pos)) is not None:
        end = None
        if begin.end() >= unterminated_until:
            body_end = _match_end(_PEM_BODY_RE, text, begin.end())
            end = _PEM_END_RE.match(text, body_end)
            if end is None:
                unterminated_until = body_end
        stop = end.end() if end else _match_end(_PEM_TAIL_RE, text, begin.end())
        out.append(text[pos : begin.start()])
        out.append(placeholder)
        if found is not None:
            found.append(text[begin.start() : stop])
        pos = stop
    out.append(text[pos:])
    return "".join(out)


# --- URLs --------------------------------------------------------------------

_SLACK_WEBHOOK_RE = re.compile(
    r"(https?://hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9_/-]{8,}"
)
# scheme://user:password@host - keep the user, hide the password.
# The user part excludes "[" and "]" (not allowed in RFC 3986 userinfo), so a
# placeholder that replaced a token-shaped user name is never read as user:password.
# A password may itself hold "@" or "/" (people paste them unescaped), so it runs to the
# LAST "@" that a host name follows; a run of digits then "/" after the colon is a port
# (host:8080/path@x), not a password. The host look-ahead is bounded, so each "://" costs
# at most a few hundred steps.
_URL_PASSWORD_RE = re.compile(
    r"(://[^\s/@:\[\]]{0,256}:)(?!\[REDACTED:|[0-9]{1,5}/)[^\s]{1,256}"
    r"(?=@[A-Za-z0-9._~%-]{1,253}(?:[:/?#\s'\"`),;\]]|$))"
)

# --- token-shaped secrets ----------------------------------------------------

_TOKEN_CHAR = "A-Za-z0-9_-"
_TOKEN_RULES: tuple[tuple[str, str], ...] = (
    ("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{32,}"),
    # Covers legacy sk-<48> keys and the sk-proj- / sk-svcacct- / sk-admin- forms.
    ("openai_key", r"sk-[A-Za-z0-9_-]{32,}"),
    ("github_token", r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}"),
    # xoxe-: the refresh tokens of Slack's token rotation (also xoxe.xoxp-1-...).
    ("slack_token", r"xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
                    r"|xoxe(?:\.xox[a-z])?-[A-Za-z0-9-]{10,}"),
    ("aws_access_key_id", r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
    ("google_api_key", r"AIza[A-Za-z0-9_-]{35}"),
    ("stripe_key", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    # A JWT with alg "none" has an empty signature: header, payload and the final dot.
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.(?:[A-Za-z0-9_-]{8,})?"),
    # Formats detect-secrets (scopemem.secrets) has no rule for, or finds in one file's
    # syntax only; each is its issuer's documented shape.
    ("npm_token", r"npm_[A-Za-z0-9]{36}"),
    ("pypi_token", r"pypi-[A-Za-z0-9_-]{50,}"),
    ("huggingface_token", r"hf_[A-Za-z0-9]{30,}"),
    ("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}"),
    # HashiCorp Vault service, batch and recovery tokens.
    ("vault_token", r"hv[sbr]\.[A-Za-z0-9_-]{24,}"),
    # age identities: bech32 after the "1" (no 1, B, I or O), 58 characters.
    ("age_secret_key", r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}"),
    ("databricks_token", r"dapi[a-f0-9]{32}(?:-[0-9]+)?"),
    # Shopify admin, custom-app and private-app tokens and shared secrets.
    ("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    # Google OAuth client secrets; Linear API keys.
    ("google_oauth_secret", r"GOCSPX-[A-Za-z0-9_-]{28}"),
    ("linear_key", r"lin_api_[A-Za-z0-9]{40}"),
)
_TOKEN_RE_ALL = re.compile(
    rf"(?<![{_TOKEN_CHAR}])(?:"
    + "|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _TOKEN_RULES)
    + rf")(?![{_TOKEN_CHAR}])"
)


def _token_replacement(match: re.Match[str]) -> str:
    return redaction_placeholder(match.lastgroup or "credential")


# --- HTTP authorization --------------------------------------------------------

# `Authorization: <scheme> <value>`: the header name plus a scheme word make the
# context unambiguous, so any value is redacted (the scheme word is kept). With no
# scheme word the value must look like a credential (8+ characters with a digit
# among the first 256; the bound keeps the look-ahead from rescanning a long run
# once per "authorization" inside it), so prose such as "Authorization: RBAC via
# OPA" survives.
_AUTH_HEADER = r"(?>authorization[\"']?[ \t]*[:=][ \t]*[\"']?)"
_AUTHORIZATION_RE = re.compile(
    r"(?i)("
    + _AUTH_HEADER
    + r"(?:bearer|basic|token|digest|negotiate)[ \t]+)"
    + _SKIP_VALUE
    + r"[^\s'\"`]+"
)
_AUTHORIZATION_RAW_RE = re.compile(
    r"(?i)(" + _AUTH_HEADER + r")" + _SKIP_VALUE + r"(?=[^\s'\"`0-9]{0,255}[0-9])[^\s'\"`]{8,}"
)
# A bare `Bearer <token>` outside a header. "bearer" is an ordinary English word,
# so the token must look like one: 16+ token68 characters including a digit.
_BEARER_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])(bearer[ \t]+)"
    r"(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}(?![A-Za-z0-9._~+/=-])"
)

# --- key = value credentials ------------------------------------------------

# The key must END in one of these words (so DB_PASSWORD, client_secret and
# GITHUB_TOKEN match, while maxTokens, passwordless or secrets: do not).
_KEY_WORDS = (
    r"(?P<aws>secret[_-]?access[_-]?key)"
    r"|pass(?:word|wd|phrase)|secret|token|api[_-]?key|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key"
)
def key_value_pattern(key_words: str) -> re.Pattern[str]:
    """The ``key = value`` rule for keys that end in one of ``key_words`` (a regex
    alternation): the key, separator and quotes are kept by :func:`key_value_replacement`,
    the value replaced. A value that is a placeholder or an environment-variable reference
    is left alone."""
    return re.compile(
        r"(?i)(?P<key>(?>(?:"
        + key_words
        + r")[\"'*]{0,2}[ \t]*(?::=|=>|==?|:)(?:\*\*)?[ \t]*))"
        + _SKIP_VALUE
        + r"(?:\"(?P<dq>(?:[^\"\\\r\n]|\\.){1,512})\""
        r"|'(?P<sq>(?:[^'\\\r\n]|\\.){1,512})'"
        r"|(?P<open>[\"'`]?)(?P<bare>[^\s'\"`&]+))"
    )


_KEY_VALUE_RE = key_value_pattern(_KEY_WORDS)


def key_value_replacement(match: re.Match[str]) -> str:
    """The replacement for a :func:`key_value_pattern` match: the key kept, the value a
    placeholder (``aws_secret_key`` when the rule names an ``aws`` group that matched)."""
    aws = match.groupdict().get("aws")
    placeholder = redaction_placeholder("aws_secret_key" if aws else "credential")
    key = match["key"]
    if match["dq"] is not None:
        return f'{key}"{placeholder}"'
    if match["sq"] is not None:
        return f"{key}'{placeholder}'"
    return f"{key}{match['open']}{placeholder}"


_Replacement = str | Callable[[re.Match[str]], str]
#: One redaction step: the text with its secrets replaced, each removed secret appended to
#: the list when one is given.
Stage = Callable[[str, "list[str] | None"], str]


def removed_part(original: str, replacement: str) -> str:
    """What a replacement took out of ``original``: the middle left once the prefix and
    suffix the two share (a key name, a quote) are set aside."""
    limit = min(len(original), len(replacement))
    start = 0
    while start < limit and original[start] == replacement[start]:
        start += 1
    end = 0
    while end < limit - start and original[-1 - end] == replacement[-1 - end]:
        end += 1
    return original[start : len(original) - end]


def substitution(pattern: re.Pattern[str], repl: _Replacement, needs: tuple[str, ...] = (),
                 folded_needs: tuple[str, ...] = ()) -> Stage:
    """A stage that replaces every match of ``pattern`` by ``repl`` (a template or a
    function, as :meth:`re.Pattern.sub` takes) and records what each replacement removed.

    ``needs`` are substrings of which every match holds one, ``folded_needs`` lowercase
    ones of which every lowercased match holds one: a text without them is passed over
    without running the pattern (a search costs a few microseconds per rule; a substring
    test, a fraction of one)."""
    def stage(text: str, found: list[str] | None) -> str:
        if needs and not any(need in text for need in needs):
            return text
        if folded_needs:
            folded = text.lower()
            if not any(need in folded for need in folded_needs):
                return text
        if found is None:
            return pattern.sub(repl, text)

        def recording(match: re.Match[str]) -> str:
            out = repl(match) if callable(repl) else match.expand(repl)
            found.append(removed_part(match[0], out))
            return out

        return pattern.sub(recording, text)

    return stage


_sub = substitution


_ASSIGNS = (":", "=")


# Every key word holds one of these (lowercased).
_KEY_LITERALS = ("pass", "secret", "token", "key")
_PIECE_BREAK = re.compile(r".\?|\[[^\]]*\]")


def _mandatory_literal(word: str) -> str | None:
    """The last literal every match of the key-word fragment ``word`` holds (``key`` for
    ``api_?key``: the end of a key, so rarer in prose than its start), or ``None`` when that
    cannot be read off it (it has groups or repeats beyond ``x?`` and ``[..]``)."""
    if any(char in word for char in "|()*+{\\.^$"):
        return None
    pieces = _PIECE_BREAK.sub(" ", word.lower()).split()
    return pieces[-1] if pieces else None


def redaction_stages(extra_key_words: tuple[str, ...] = ()) -> tuple[Stage, ...]:
    """The core's redaction steps, in order; ``extra_key_words`` (regex fragments such as
    ``db_?pass`` or ``credentials?``, from a library's keyword list) join the words a
    ``key = value`` key may end in.

    Order matters: whole PEM blocks first (their dashes and base64 would otherwise be read
    as tokens), then URLs, then token shapes, then the context-based rules that keep a key
    or header name and replace the value."""
    key_value = (_KEY_VALUE_RE if not extra_key_words
                 else key_value_pattern("|".join((_KEY_WORDS, *extra_key_words))))
    literals = [_mandatory_literal(word) for word in extra_key_words]
    # A word whose literal cannot be read off leaves the rule ungated.
    key_literals = (() if None in literals
                    else (*_KEY_LITERALS, *(literal for literal in literals if literal)))
    return (
        _redact_pem,
        _sub(_SLACK_WEBHOOK_RE, r"\g<1>" + redaction_placeholder("slack_webhook"),
             ("hooks.slack.com",)),
        _sub(_URL_PASSWORD_RE, r"\g<1>" + redaction_placeholder("url_password"), ("://",)),
        _sub(_TOKEN_RE_ALL, _token_replacement),
        _sub(_AUTHORIZATION_RE, r"\g<1>" + redaction_placeholder("authorization"), _ASSIGNS),
        _sub(_AUTHORIZATION_RAW_RE, r"\g<1>" + redaction_placeholder("authorization"),
             _ASSIGNS),
        _sub(_BEARER_RE, r"\g<1>" + redaction_placeholder("bearer_token")),
        _sub(key_value, key_value_replacement, _ASSIGNS, key_literals),
    )


_STAGES = redaction_stages()


def redact_secrets(text: str, found: list[str] | None = None) -> str:
    """Replace credential-shaped substrings of ``text`` with typed placeholders.

    Applied to anything that leaves the process for a model (the reflection
    input) and to everything the extractor returns before it is stored, because
    both the extractor and the memory store are outside the trust boundary of
    the conversation that produced the text.

    Each secret becomes ``[REDACTED:<kind>]`` (see :data:`REDACTION_KINDS`); the
    kind tells a reader, human or model, what was there without revealing it.
    Recognised shapes:

    * PEM ``-----BEGIN ... PRIVATE KEY-----`` blocks through their END line
      (a block with no END line loses its header and the key-like lines after it);
    * Slack webhook URLs (path hidden) and the password in ``scheme://user:pw@host``
      (a password holding ``@`` or ``/`` included);
    * provider tokens, matched only as whole words and with realistic minimum
      lengths: Anthropic ``sk-ant-``, OpenAI ``sk-`` (incl. ``sk-proj-``), GitHub
      ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab
      ``glpat-``, Slack ``xox[abposr]-``/``xapp-``/``xoxe-``, AWS ``AKIA``/``ASIA``
      key ids, Google ``AIza`` keys, Stripe ``sk_``/``rk_`` live and test keys, JWTs
      (unsigned ones too), npm ``npm_``, PyPI ``pypi-``, Hugging Face ``hf_``,
      DigitalOcean ``dop_v1_``/``doo_v1_``/``dor_v1_``, Vault ``hvs.``/``hvb.``/``hvr.``,
      ``AGE-SECRET-KEY-1``, Databricks ``dapi``, Shopify ``shpat_``-style tokens, Google
      OAuth client secrets ``GOCSPX-`` and Linear ``lin_api_`` keys;
    * ``Authorization: <scheme> <value>`` headers (scheme kept) and bare
      ``Bearer <token>`` where the token is 16+ characters with a digit;
    * ``key = value`` / ``key: value`` pairs whose key ends in password, passwd,
      passphrase, secret, token, api_key/apikey, access_key, secret_key or
      private_key (any case, any prefix such as ``DB_``). The key, separator and
      quotes are kept and only the value is replaced; an
      ``aws_secret_access_key`` value is tagged ``aws_secret_key``. A value that
      is only an environment-variable reference (``$VAR``, ``${VAR}``) is kept.

    The text is read as it will be rendered (:func:`redact_as_rendered`): a token split by
    a zero width space, a soft hyphen or a word joiner (which rendering deletes) is found
    whole, and a text that had a secret comes back without such characters.

    Ordinary prose is left alone: a key word needs an assignment separator right
    after it, and token shapes need their prefix plus a realistic length. The
    trade-off is that ``the secret: caching`` does lose the word after the colon.

    The function never raises, runs in time linear in ``len(text)`` and is
    idempotent. Given ``found``, it appends each secret it removed (the value alone where
    a key name was kept), so a caller can tell which other strings held one.
    """
    return redact_as_rendered(_redact, text, found)


def _redact(text: str, found: list[str] | None) -> str:
    for stage in _STAGES:
        text = stage(text, found)
    return text


def redact_as_rendered(redact: Stage, text: str, found: list[str] | None = None) -> str:
    """``redact`` applied to ``text`` as it will be rendered (:func:`strip_invisible`), so a
    secret split by an invisible character is seen whole. A text in which nothing is
    redacted comes back exactly as it was; one in which something is comes back redacted,
    without the invisible characters."""
    stripped = strip_invisible(text)
    redacted = redact(stripped, found)
    return text if redacted == stripped else redacted


#: A keyword this long or longer that a redacted value contains is part of the secret.
_MIN_PART = 6


def _holds_secret(keyword: str, secrets: set[str]) -> bool:
    return keyword in secrets or any(
        (len(secret) >= 4 and secret in keyword)
        or (len(keyword) >= _MIN_PART and keyword in secret)
        for secret in secrets)


def _keyword_forms(keyword: str) -> tuple[str, str]:
    """A keyword as redaction reads it (invisible characters stripped, compatibility forms
    such as fullwidth letters folded, case ignored), and that without its spaces."""
    folded = unicodedata.normalize("NFKC", strip_invisible(keyword)).casefold()
    return folded, "".join(folded.split())


def secret_free_keywords(keywords: tuple[str, ...], found: list[str],
                         redact: Stage = redact_secrets) -> tuple[str, ...]:
    """``keywords`` less every one that holds a secret, judged in the context of their
    text: ``found`` is what redacting the original text removed (so ``hunter2`` goes when
    the text said ``password=hunter2``, though the redacted text no longer shows it). A
    keyword is dropped when it contains a secret from ``found`` or from the keywords read
    together as one line by ``redact`` (``password=`` then ``hunter2``), or is a part (6+
    characters) of one; case is ignored, since an extractor may lowercase its keywords."""
    if not keywords:
        return keywords
    found = list(found)
    redact(" ".join(keywords), found)
    secrets = {value.casefold() for value in found if value}
    if not secrets:
        return keywords
    return tuple(keyword for keyword in keywords
                 if not any(_holds_secret(form, secrets) for form in _keyword_forms(keyword)))
