"""How a redaction rule is run: the ``[REDACTED:<kind>]`` placeholder, a rule as a
``Stage`` (a pattern and its replacement, recording what it removed), text read as it will be
rendered, and the keywords that must go with a secret found in their text.

The rules themselves are elsewhere: the core's in :mod:`scopemem.core.secret_rules`, the
host's wider set in ``scopemem.secrets``. Both are built from ``substitution`` and judged by
``secret_free_keywords`` here, so a rule added to either is recorded and screened alike.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

from scopemem.core.text import strip_invisible

__all__ = [
    "REDACTION_KINDS",
    "Stage",
    "redact_as_rendered",
    "redaction_placeholder",
    "removed_part",
    "secret_free_keywords",
    "substitution",
    "word_lengths",
]

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


@functools.lru_cache(maxsize=1)
def word_lengths(text: str) -> tuple[int, int]:
    """The length of the longest word of ``text`` (a run of non-whitespace characters, as
    :meth:`str.split` finds them) and how many of its words are one character long.

    What a text of prose is passed over by: a token is a long word, a spaced-out one many
    one-character words. The stages of a redaction read the same text one after another (a
    stage that finds nothing returns its text as it came), so the last answer is kept."""
    lengths = list(map(len, text.split()))
    return max(lengths, default=0), lengths.count(1)


def substitution(pattern: re.Pattern[str], repl: _Replacement, needs: tuple[str, ...] = (),
                 folded_needs: tuple[str, ...] = (), min_word: int = 0) -> Stage:
    """A stage that replaces every match of ``pattern`` by ``repl`` (a template or a
    function, as :meth:`re.Pattern.sub` takes) and records what each replacement removed.

    ``needs`` are substrings of which every match holds one, ``folded_needs`` lowercase
    ones of which every lowercased match holds one, ``min_word`` a length of which every
    match holds a run of non-whitespace characters: a text without them is passed over
    without running the pattern (a search costs a few microseconds per rule; a substring
    test, a fraction of one)."""
    def stage(text: str, found: list[str] | None) -> str:
        # Plain loops, not ``any()`` over a generator: this runs for every rule on every
        # text written, and most texts are passed over here.
        if min_word and word_lengths(text)[0] < min_word:
            return text
        if needs:
            for need in needs:
                if need in text:
                    break
            else:
                return text
        if folded_needs:
            folded = text.lower()
            for need in folded_needs:
                if need in folded:
                    break
            else:
                return text
        if found is None:
            return pattern.sub(repl, text)

        def recording(match: re.Match[str]) -> str:
            out = repl(match) if callable(repl) else match.expand(repl)
            found.append(removed_part(match[0], out))
            return out

        return pattern.sub(recording, text)

    return stage


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
                         redact: Stage) -> tuple[str, ...]:
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
