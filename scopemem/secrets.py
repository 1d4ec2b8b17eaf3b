"""Secret detection for everything memory keeps or sends: a well-kept rule set, loaded as data.

:func:`redact` is what every write applies (``stores.base.fit_batch``, so every store, the
worker's own ``/write`` and the worker client; and ``plugins.host.screen_candidate``, so
reflection and ``remember`` too) and what the reflection input is passed through. It reads
the text as it will be rendered (``core.redaction.redact_as_rendered``), then runs, in order:

1. the core's own rules (``core.secret_rules.redaction_stages``: PEM blocks, URL passwords,
   provider tokens, ``Authorization`` headers, ``key = value`` credentials), with the
   words a credential's key may end in widened by detect-secrets' ``KeywordDetector`` list
   (``pwd``, ``db_pass``, ``auth_key``, ...) and ``credentials``, ``_pass``, ``_pw``.
   The core's token table holds the formats detect-secrets has no rule for (``npm_``,
   ``hf_``, ``dop_v1_``, ``hvs.``, ``AGE-SECRET-KEY-1``, ``dapi``, ``shpat_``, Slack
   ``xoxe-``, unsigned JWTs, ``GOCSPX-``, ``lin_api_``), each commented there;
2. formats that no rule set here has, each in its own context (detect-secrets has no rule
   for them, and gitleaks' rules ship inside its Go binary, not as data on PyPI): ``curl -u
   user:password`` / ``--user``, a key as a URL's user (a Sentry DSN), ``mysql -pSECRET``,
   ``sshpass -p SECRET``, ``.netrc`` ``password`` lines;
3. the regex rules of Yelp's detect-secrets plugins, used as data
   (``secret_library.library_stage``);
4. high-entropy values of any ``key = value``, ``key: value`` or quoted assignment, by
   detect-secrets' Shannon entropy (``secret_library.ENTROPY_STAGE``);
5. credentials named in prose (``the password is X``, ``pass: X``) whose value reads as a
   password, and AWS secret keys in a text that names AWS.

Then the rules are run again on what a text hides: base64 runs, decoded; spaced-out
characters, joined; fullwidth and other compatibility forms, folded (``redact``).

Each secret becomes ``[REDACTED:<kind>]``, as the core's do. Ordinary lessons (commands,
paths, versions, short hex such as ``abc123``, git shas in prose) are left as they are; a
hex value assigned to a key that names a hash (``commit=``, ``sha256:``, ``digest=``) is
kept too.

:func:`redact_candidate` redacts a candidate's keywords in the context of its original text
(``core.redaction.secret_free_keywords``, which reflection uses too): a keyword that holds (or is
part of) a value redacted from the text or from the keywords read together (``password=``
then ``hunter2``) is dropped.
"""

from __future__ import annotations

import base64
import functools
import re
import unicodedata

import attrs

from scopemem import secret_library
from scopemem.core.hygiene import cut_text
from scopemem.core.records import MAX_TEXT_CHARS, Candidate
from scopemem.core.redaction import (
    Stage,
    redact_as_rendered,
    redaction_placeholder,
    secret_free_keywords,
    substitution,
    word_lengths,
)
from scopemem.core.secret_rules import redaction_stages

__all__ = ["redact", "redact_candidate"]

# A token is matched only as a whole run of these characters, as in the core.
_TOKEN = "A-Za-z0-9_-"

# curl -u user:password / --user user:password (also wget, httpie): keep the user. A
# password that is only an environment variable ($TOKEN, ${TOKEN}) names a secret and is kept.
_CURL_USER_RE = re.compile(
    r"(?<![\w-])((?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"'\[\]]{1,128}:)"
    r"(?!\[REDACTED:|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(?:[\s\"']|$))[^\s\"']{1,256}"
)

# Formats no rule set here has, each as narrow as its context allows; the value of each is
# replaced, what names it kept. A value that is a placeholder or starts with ``$`` (an
# environment variable: $PASS, ${PASS}) is left alone.
_NOT_A_VALUE = r"(?!\[REDACTED:|\$)"
# A value's characters: never a placeholder's start, so a second pass never takes a
# placeholder (``-p$[REDACTED:...]``) for a value.
_VALUE = r"(?:(?!\[REDACTED:)[^\s\"'`])"
# ``mysql -pSECRET`` (the password glued to -p: a bare ``-p`` prompts for it) and the other
# MySQL / MariaDB clients: the flag is looked for in the rest of the command (up to a line
# break, ``|``, ``;`` or ``&``).
_MYSQL_RE = re.compile(
    r"(?<![\w-])(?:mysql(?:dump|admin|import|show|check|slap)?|mariadb(?:-dump|-admin)?)\b"
    r"[^\n|;&]*"
)
_MYSQL_FLAG_RE = re.compile(r"(?<=[ \t])(-p[\"']?)" + _NOT_A_VALUE + _VALUE + "{1,256}")
# ``sshpass -p SECRET``, after any of sshpass's other options (not the command's own -p).
_SSHPASS_RE = re.compile(
    r"(?<![\w-])(sshpass(?:[ \t]+-(?:[fdP][ \t]*\S{1,256}|[evhV]))*[ \t]+-p[ \t]*[\"']?)"
    + _NOT_A_VALUE + _VALUE + "{1,256}"
)


def _mysql_stage(text: str, found: list[str] | None) -> str:
    if "-p" not in text:
        return text

    def password(match: re.Match[str]) -> str:
        if found is not None:
            found.append(match[0][len(match[1]):])
        return match[1] + redaction_placeholder("credential")

    return _MYSQL_RE.sub(lambda command: _MYSQL_FLAG_RE.sub(password, command[0]), text)


# .netrc: ``machine HOST login USER password SECRET`` on one line, or a line that is only
# ``password SECRET`` (the file's multi-line form).
_NETRC_RE = re.compile(
    r"(?im)(?:(\blogin[ \t]+\S{1,256}[ \t]+password[ \t]+)" + _NOT_A_VALUE + _VALUE + "{1,256}"
    r"|(^[ \t]*password[ \t]+)" + _NOT_A_VALUE + _VALUE + r"{1,256}(?=[ \t]*$))"
)
# A credential named in prose: ``the password is X``, ``pass: X``, ``aws secret X``. The
# words around are weak context, so the value must look like a password (see
# ``_password_like``): ``the password is stored in Vault`` keeps its words.
_SPOKEN_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])(?P<key>(?P<word>pass(?:word|wd|phrase)?|pwd|token"
    r"|secret(?:[ _-]access)?(?:[ _-]key)?|(?:api|access)[ _-]?key)s?"
    r"(?P<sep>[ \t]*[:=][ \t]*|[ \t]+(?:is|was)[ \t]+|[ \t]+)[\"'`]?)"
    + _NOT_A_VALUE + r"(?P<value>" + _VALUE + "{6,128})(?!" + _VALUE + ")"
)
_VERSION_RE = re.compile(r"v?[0-9]+(?:\.[0-9]+)+\S*")
_COMPOUND_RE = re.compile(r"[a-z0-9]+(?:-[a-z]{3,})+")  # sha256-hashed, base64-encoded
# The technical terms with a digit that follow "the token is", "the password is" in prose.
_TERM_RE = re.compile(
    r"(?i)(?:base(?:32|58|64)(?:url)?|sha-?[0-9]*|md5|argon2(?:id|i|d)?|pbkdf2|bcrypt|scrypt"
    r"|oauth[12]|http[23]|utf-?(?:8|16|32)|aes-?[0-9]+(?:-?gcm)?|rsa-?[0-9]+|[hre]s[0-9]{3}"
    r"|ed25519|x509|pkcs[0-9]+|v[0-9]+[a-z0-9]*|[0-9]+(?:bit|byte|char|day|hour|min|sec)s?)"
)
_TRAILING = ".,;:)"


def _password_like(value: str) -> bool:
    """Whether a value named in prose reads as a password or key: a letter and a digit,
    and neither a version (``v1.2.3``), a hyphenated word (``sha256-hashed``) nor a
    technical term (``base64``, ``argon2id``, ``RS256``, ``v2beta1``, ``32bytes``)."""
    return bool(secret_library.letter_and_digit(value)
                and not _VERSION_RE.fullmatch(value) and not _COMPOUND_RE.fullmatch(value)
                and not _TERM_RE.fullmatch(value))


def _spoken_replacement(match: re.Match[str]) -> str:
    value = match["value"].rstrip(_TRAILING)
    if (len(value) < 6 or not _password_like(value)
            or (match["word"].lower() == "pass" and not match["sep"].strip())):
        return match[0]  # "pass the build", "token 12": a verb or a count, not a secret
    return (match["key"] + redaction_placeholder("credential")
            + match["value"][len(value):])


# A key in a URL's user part (a Sentry DSN: ``https://<key>@o1.ingest.sentry.io/2``): 20 or
# more token characters with a letter and a digit, where a user name would be.
_URL_KEY_RE = re.compile(
    r"(://)(?=[A-Za-z0-9_-]{0,127}[0-9])(?=[A-Za-z0-9_-]{0,127}[A-Za-z])[A-Za-z0-9_-]{20,128}"
    r"(?=@[A-Za-z0-9.-])"
)

# An AWS secret access key (40 characters of base64, upper and lower case and a digit) in
# a text that names AWS: the key id beside it is a token the rules know, the secret is not.
_AWS_SECRET_CHARS = 40
_AWS_SECRET_RE = re.compile(
    r"(?<![A-Za-z0-9/+=_-])(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])"
    rf"(?=[A-Za-z0-9/+]{{0,39}}[A-Z])[A-Za-z0-9/+]{{{_AWS_SECRET_CHARS}}}(?![A-Za-z0-9/+=_-])"
)

# Key words (beyond the core's) that make ``key = value`` a credential: detect-secrets'
# KeywordDetector list, plus credentials and the ``SMTP_PASS`` / ``DB_PW`` forms.
_EXTRA_KEY_WORDS = (r"credentials?", r"[_-]pass", r"[_-]pw")

# --- the pipeline --------------------------------------------------------------------------


@functools.cache
def _stages() -> tuple[Stage, ...]:
    """Every stage, built once (the first redaction loads the library): the core's, with
    the library's key words added to its ``key = value`` rule, then the ones above, the
    library's rules and its entropy (``secret_library``), then the spoken and AWS ones."""
    credential = r"\g<1>" + redaction_placeholder("credential")
    return (
        *redaction_stages((*secret_library.key_words(), *_EXTRA_KEY_WORDS)),
        substitution(_CURL_USER_RE, credential, ("-u", "--user")),
        substitution(_URL_KEY_RE, r"\g<1>" + redaction_placeholder("url_key"), ("://",)),
        _mysql_stage,
        substitution(_SSHPASS_RE, credential, ("sshpass",)),
        substitution(_NETRC_RE, lambda match: (match[1] or match[2])
                     + redaction_placeholder("credential"), folded_needs=("password",)),
        secret_library.library_stage(),
        secret_library.ENTROPY_STAGE,
        substitution(_SPOKEN_RE, _spoken_replacement,
                     folded_needs=("pass", "pwd", "token", "secret", "key")),
        substitution(_AWS_SECRET_RE, redaction_placeholder("aws_secret_key"),
                     folded_needs=("aws",), min_word=_AWS_SECRET_CHARS),
    )


def _rules(text: str, found: list[str] | None) -> str:
    for stage in _stages():
        text = stage(text, found)
    return text


# --- secrets in disguise -------------------------------------------------------------------

# A run of base64 (standard or URL-safe) long enough to hold a token: a word of 24 or more
# characters (``word_lengths``).
_BASE64_MIN = 24
_BASE64_RE = re.compile(
    rf"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{{{_BASE64_MIN},4096}}={{0,2}}(?![A-Za-z0-9+/=_-])")
_PRINTABLE_RE = re.compile(r"[^\x00-\x08\x0e-\x1f\x7f]*")
# Single characters spaced out, 16 or more (``g h p _ x x x ...``): each one a word of one
# character (``word_lengths``).
_SPACED_MIN = 16
_SPACED_RE = re.compile(rf"(?<!\S)\S(?:[ \t]+\S(?!\S)){{{_SPACED_MIN - 1},}}")


def _decoded_stage(text: str, found: list[str] | None) -> str:
    """Each base64 run whose decoding is text holding a secret becomes a placeholder."""
    if word_lengths(text)[0] < _BASE64_MIN:
        return text

    def replace(match: re.Match[str]) -> str:
        blob = match[0].rstrip("=")
        altchars = b"-_" if "-" in blob or "_" in blob else None
        try:
            decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), altchars,
                                       validate=True).decode()
        except ValueError:  # not base64, or not UTF-8 (UnicodeDecodeError is a ValueError)
            return match[0]
        inner: list[str] = []
        if not _PRINTABLE_RE.fullmatch(decoded) or _rules(decoded, inner) == decoded:
            return match[0]
        if found is not None:
            found.extend((match[0], *inner))
        return redaction_placeholder("encoded_secret")

    return _BASE64_RE.sub(replace, text)


def _spaced_stage(text: str, found: list[str] | None) -> str:
    """Each run of spaced-out characters whose letters read together hold a secret is
    replaced by those letters, redacted."""
    if word_lengths(text)[1] < _SPACED_MIN:
        return text

    def replace(match: re.Match[str]) -> str:
        joined = "".join(match[0].split())
        redacted = _rules(joined, found)
        return match[0] if redacted == joined else redacted

    return _SPACED_RE.sub(replace, text)


def _unmasked(text: str, found: list[str] | None) -> str:
    return _spaced_stage(_decoded_stage(_rules(text, found), found), found)


def redact(text: str, found: list[str] | None = None) -> str:
    """``text`` with every secret the rules above recognise replaced by a placeholder; each
    removed secret is appended to ``found`` when it is given. Idempotent.

    The text is read as it will be rendered (``core.redaction.redact_as_rendered``: a token split
    by a zero width space is seen whole) and the rules are run again on what it hides:
    base64 runs, decoded; runs of spaced-out characters, joined; and, when the text has any,
    compatibility forms such as fullwidth letters folded (NFKC). A text that held a secret
    only in its folded form is returned folded, redacted; one that held none, unchanged."""
    return redact_as_rendered(_redact, text, found)


def _redact(text: str, found: list[str] | None) -> str:
    text = _unmasked(text, found)
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    folded = unicodedata.normalize("NFKC", text)
    hidden: list[str] = []
    redacted = _unmasked(folded, hidden)
    if redacted == folded:
        return text
    if found is not None:
        found.extend(hidden)
    return redacted


def redact_candidate(candidate: Candidate) -> Candidate:
    """The candidate with its text redacted and every keyword that holds a secret dropped
    (``core.redaction.secret_free_keywords``: judged against what redacting the text removed).

    A text far over the record cap is first cut to twice the cap at a word boundary (what
    follows could never be stored, and the cut bounds the work)."""
    found: list[str] = []
    text = redact(cut_text(candidate.text, 2 * MAX_TEXT_CHARS), found)
    keywords = candidate.keywords
    if keywords:
        keywords = secret_free_keywords(keywords, found, redact)
    if text == candidate.text and keywords == candidate.keywords:
        return candidate
    return attrs.evolve(candidate, text=text, keywords=keywords)
