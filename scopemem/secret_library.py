"""The part of secret detection taken from Yelp's detect-secrets, as data: the regex rules
of its plugins (their ``denylist`` patterns), its ``KeywordDetector`` words, and its Shannon
entropy for values of any assignment. ``scopemem.secrets`` runs these among its stages.

The plugins' own scanning (``analyze_line``) is not used: it reports values, not where they
are, and for some rules only a prefix. The library is imported with the first redaction, not
when a command that writes nothing starts.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable

from scopemem.core.redaction import Stage, redaction_placeholder, substitution, word_lengths

__all__ = ["ENTROPY_STAGE", "key_words", "letter_and_digit", "library_stage"]


# detect-secrets plugins whose ``denylist`` regexes are used, and the kind each reports.
# Left out: KeywordDetector and the high-entropy plugins (logic, not rules: their words and
# entropy are used below), IPPublicDetector (a public address is not a credential), and the
# Cloudant, IBM Cloud IAM, IBM COS HMAC and SoftLayer rules: each is a ``<name>_key|pwd|
# password|token = <value>`` assignment, which the key-word rule already redacts (``_pw``,
# ``api_key``, ``secret_access_key``, ``password``), and together they were half the
# library stage's cost (a look-behind at every position). NpmDetector too: its
# ``//host/:_authToken=`` line is a ``token =`` assignment to the key-word rule and its
# ``npm_`` token is in the core's table, while its ``//.+/`` costs time quadratic in a line
# of slashes.
_LIBRARY_PLUGINS: tuple[tuple[str, str, str], ...] = (
    ("artifactory", "ArtifactoryDetector", "artifactory_token"),
    ("aws", "AWSKeyDetector", "aws_access_key_id"),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure_storage_key"),
    ("basic_auth", "BasicAuthDetector", "url_password"),
    ("discord", "DiscordBotTokenDetector", "discord_token"),
    ("github_token", "GitHubTokenDetector", "github_token"),
    ("gitlab_token", "GitLabTokenDetector", "gitlab_token"),
    ("jwt", "JwtTokenDetector", "jwt"),
    ("mailchimp", "MailchimpDetector", "mailchimp_key"),
    ("openai", "OpenAIDetector", "openai_key"),
    ("pypi_token", "PypiTokenDetector", "pypi_token"),
    ("sendgrid", "SendGridDetector", "sendgrid_key"),
    ("slack", "SlackDetector", "slack_token"),
    ("square_oauth", "SquareOAuthDetector", "square_secret"),
    ("stripe", "StripeDetector", "stripe_key"),
    ("telegram_token", "TelegramBotTokenDetector", "telegram_token"),
    ("twilio", "TwilioKeyDetector", "twilio_key"),
)
# PrivateKeyDetector's rules find only the BEGIN line; the core removes whole blocks.

# What a library match is widened to (a rule may match only the head of a token) and what
# is trimmed from its ends (rules that match their delimiters or a ``Name=`` lead).
_RUN_LEFT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_RUN_RIGHT = re.compile(r"[A-Za-z0-9_+/=.-]*")
_LEAD = re.compile(r"(?:[A-Za-z_]{1,40}[=:])?[\s\"'=:]*")
_TAIL = re.compile(r"[\s\"'=:.]*\Z")


# Every library token rule matches inside a run of 10 or more
# of these characters that holds something other than a lowercase letter (a digit, a
# capital, "_", "-", ...). Plain prose has no such run, so one search of this pattern lets
# a text skip some thirty rules; a text whose words are all shorter (``word_lengths``,
# which the other stages share) skips the search too.
_TOKEN_RUN = 10
_TOKEN_GATE = re.compile(
    rf"(?<![A-Za-z0-9_+/=.:-])(?=[A-Za-z0-9_+/=.:-]{{{_TOKEN_RUN}}})[a-z]*[A-Z0-9_+/=.:-]")


def _gated(inner: Stage) -> Stage:
    def stage(text: str, found: list[str] | None) -> str:
        if word_lengths(text)[0] < _TOKEN_RUN or not _TOKEN_GATE.search(text):
            return text
        return inner(text, found)

    return stage


def _library_stage(rules: tuple[tuple[str, re.Pattern[str]], ...]) -> Stage:
    def stage(text: str, found: list[str] | None) -> str:
        spans: list[tuple[int, int, str]] = []
        for kind, pattern in rules:
            # Where this rule's last span ended: a match inside it is already covered, and
            # widening stops there, so a run of many matches costs its length once.
            reach = 0
            for match in pattern.finditer(text):
                if match.start() < reach:
                    continue
                start, end = match.span()
                groups = [index for index in range(1, (pattern.groups or 0) + 1)
                          if match.end(index) - match.start(index) >= 8]
                if groups:
                    start, end = max((match.span(index) for index in groups),
                                     key=lambda span: span[1] - span[0])
                start += _LEAD.match(text, start, end).end() - start  # type: ignore[union-attr]
                end = start + len(_TAIL.sub("", text[start:end]))
                if end - start < 8 or text.startswith("[REDACTED:", start):
                    continue
                while start > reach and text[start - 1] in _RUN_LEFT:
                    start -= 1
                end = _RUN_RIGHT.match(text, end).end()  # type: ignore[union-attr]
                spans.append((start, end, kind))
                reach = end
        if not spans:
            return text
        out: list[str] = []
        pos = 0
        for start, end, kind in sorted(spans):
            if end <= pos:
                continue
            start = max(start, pos)
            out.append(text[pos:start])
            out.append(redaction_placeholder(kind))
            if found is not None:
                found.append(text[start:end])
            pos = end
        out.append(text[pos:])
        return "".join(out)

    return stage


# --- high entropy --------------------------------------------------------------------------

# Any assignment: a name, a separator, then a value of base64/hex/url-safe characters,
# bare or quoted. Whether it is a secret is decided by its entropy.
_MIN_VALUE = 20
_ASSIGNMENT_RE = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z_][A-Za-z0-9_.-]{0,63})[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    rf"(?P<open>[\"'`]?)(?!\[REDACTED:)(?P<value>[A-Za-z0-9+/=_.~-]{{{_MIN_VALUE},512}})"
    r"(?![A-Za-z0-9+/=_.~-])"
)
_HEX_RE = re.compile(r"[0-9a-fA-F]+")
_HASH_KEY_RE = re.compile(r"(?i)(?:sha\d*|commit|rev(?:ision)?|hash|digest|checksum|etag|id)\Z")
_DIGIT_RE = re.compile(r"[0-9]")
_LETTER_RE = re.compile(r"[A-Za-z]")


def letter_and_digit(value: str) -> bool:
    """Whether ``value`` holds both a letter and a digit: what any random value does, and
    few words do."""
    return bool(_DIGIT_RE.search(value) and _LETTER_RE.search(value))


@functools.cache
def _entropy() -> tuple[Callable[[str], float], float, Callable[[str], float], float]:
    from detect_secrets.plugins.high_entropy_strings import (
        Base64HighEntropyString,
        HexHighEntropyString,
    )

    base64, hexadecimal = Base64HighEntropyString(), HexHighEntropyString()
    return (base64.calculate_shannon_entropy, base64.entropy_limit,
            hexadecimal.calculate_shannon_entropy, hexadecimal.entropy_limit)


def _high_entropy(value: str, key: str) -> bool:
    """Whether an assigned ``value`` reads as random: a letter and a digit, then
    detect-secrets' entropy over its limit. The base64 limit (4.5 bits) is out of reach of
    short strings (20 characters hold at most 4.3), so it is scaled to 0.8 of the most a
    string of that length can hold, up to the library's limit. A hex value is measured as
    hex, except under a key that names a hash (``commit=``, ``sha256:``)."""
    if not letter_and_digit(value):
        return False
    base64_entropy, base64_limit, hex_entropy, hex_limit = _entropy()
    if _HEX_RE.fullmatch(value):
        return not _HASH_KEY_RE.search(key) and hex_entropy(value) > hex_limit
    return base64_entropy(value) > min(base64_limit, 0.8 * (len(value).bit_length() - 1))


def _entropy_replacement(match: re.Match[str]) -> str:
    head = match[0][: match.start("value") - match.start()]
    if not _high_entropy(match["value"], match["key"]):
        # A value that is not random may hold an assignment of its own (``blob="A=…"``),
        # which the match has passed over: it is read as text in turn.
        return head + _ASSIGNMENT_RE.sub(_entropy_replacement, match["value"])
    return head + redaction_placeholder("high_entropy")


#: Values of any ``key = value``, ``key: value`` or quoted assignment that read as random.
ENTROPY_STAGE = substitution(_ASSIGNMENT_RE, _entropy_replacement, (":", "="),
                             min_word=_MIN_VALUE)


def key_words() -> tuple[str, ...]:
    """``KeywordDetector``'s words a credential's key may end in (regex fragments)."""
    from detect_secrets.plugins.keyword import DENYLIST

    return tuple(DENYLIST)


def library_stage() -> Stage:
    """One stage running every rule of ``_LIBRARY_PLUGINS``, gated on a token-like run."""
    rules = tuple(
        (kind, pattern)
        for module, name, kind in _LIBRARY_PLUGINS
        for pattern in getattr(importlib.import_module(f"detect_secrets.plugins.{module}"),
                               name).denylist
    )
    return _gated(_library_stage(rules))
