"""The core's secret rules: what a credential looks like in text, and ``redact_secrets``,
which replaces each one found by a typed placeholder (``core.redaction``).

The host runs these and a wider, library-backed set (``scopemem.secrets``); the core runs
these alone where it cannot reach the host (the reflection prompt's own screen).

Design notes (these are what make ``redact_secrets`` linear-time and idempotent):

* Every pattern starts with a literal or near-literal prefix ("sk-", "-----BEGIN",
  "://", a key word, ...). After it, an unbounded part either cannot fail once
  it has scanned (a trailing character class), or scans a run that no other
  attempt scans again (the prefix sits behind a word boundary, so attempts
  cannot start inside the run); everything else has an explicit upper bound.
  With Python's backtracking engine that keeps the total work linear in the
  input. The PEM rule is a small hand-written scan for the same reason.
* Token-shaped secrets are matched only as whole runs of token characters
  ``[A-Za-z0-9_-]`` (look-behind and look-ahead on that class). A placeholder
  starts with "[" and ends with "]", which are not token characters, so
  replacing one run never changes whether a neighbouring run is a match.
* Rules that keep a key name and replace only its value refuse a value that is
  already a placeholder; the key part is an atomic group so backtracking cannot
  move the value start past that check. Together these make
  redact_secrets(redact_secrets(x)) equal redact_secrets(x).
"""

from __future__ import annotations

import re

from scopemem.core.redaction import (
    Stage,
    redact_as_rendered,
    redaction_placeholder,
    substitution,
)

__all__ = ["redact_secrets", "redaction_stages"]

_sub = substitution


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
# Literals one of which every token above holds, and the length of the shortest token (a
# whole word of the text: no token holds whitespace): a text holding none of them, or whose
# words are all shorter, is passed over without running the alternation (which cost a third
# of redacting a record of prose). A rule added above needs its literal here and a shortest
# match no shorter (``tests/core/test_text.py`` checks each rule's matches).
_TOKEN_MIN = 15
_TOKEN_NEEDS = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox",
                "xapp-", "AKIA", "ASIA", "AIza", "_live_", "_test_", "eyJ", "npm_", "pypi-",
                "hf_", "_v1_", "hvs.", "hvb.", "hvr.", "AGE-SECRET-KEY-1", "dapi", "shp",
                "GOCSPX-", "lin_api_")
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
        _sub(_TOKEN_RE_ALL, _token_replacement, _TOKEN_NEEDS, min_word=_TOKEN_MIN),
        _sub(_AUTHORIZATION_RE, r"\g<1>" + redaction_placeholder("authorization"), _ASSIGNS),
        _sub(_AUTHORIZATION_RAW_RE, r"\g<1>" + redaction_placeholder("authorization"),
             _ASSIGNS),
        _sub(_BEARER_RE, r"\g<1>" + redaction_placeholder("bearer_token"),
             folded_needs=("bearer",)),
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

