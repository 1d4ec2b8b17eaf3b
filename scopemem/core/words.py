"""Words as people type them: the folding and the tokenizer every store and the scorer share.

A record written by one component must be found through any other, so there is exactly one
definition of a token, here. A token is a Unicode word, folded:

* **Case** folds fully (``str.casefold``): ``Straße`` → ``strasse``, ``ΣΟΦΊΑ`` → ``σοφια``.
* **Diacritics** fold away (``déploiement`` → ``deploiement``, ``İstanbul`` → ``istanbul``),
  NFC and NFD alike, and compatibility forms fold to their plain letters (full-width, ligature
  ``ﬁ``). Only the marks that decorate Latin, Greek, Cyrillic, Hebrew and Arabic letters are
  removed (accents, niqqud, harakat); the vowel signs that Indic, Thai or other scripts need to
  spell a word at all are kept. A few Latin letters that carry no separable mark fold as a
  keyboard without them would type them: ``ø``→``o``, ``æ``→``ae``, ``œ``→``oe``, ``ł``→``l``,
  ``đ``/``ð``→``d``, ``þ``→``th``, dotless ``ı``→``i``.
* **Words** are maximal runs of letters, digits and marks; everything else separates them,
  the underscore included (``node_modules`` is two words). Greek, Cyrillic, Arabic, Hebrew,
  Devanagari words are words like Latin ones.
* **Scripts written without spaces** (Han, Hiragana, Katakana, Hangul, Thai, Lao, Khmer,
  Myanmar) have no word boundaries to find, so such a run becomes its overlapping character
  bigrams (``数据库`` → ``数据``, ``据库``), the rule full-text engines commonly use for them; a
  run of one character is a token of one. A query for a single character of such a script
  therefore finds only a one-character word.

Matching is whole-token, so no fragment matches: ``zürich`` folds to ``zurich``, which is not
``rich``. Pure ASCII text takes a fast path with exactly these rules.

``FOLDING`` names this definition; a store that keeps tokens (the SQLite index, the dedup
key) records it and re-derives what it keeps when it changes.

An :class:`Analyzer` adds what depends on the languages a deployment speaks: the function
words a query ignores and the Snowball stemmers each word is reduced by (so ``deploys``,
``deployed`` and ``deploying`` are one term). A word of a script several listed languages
write has one stem under each of them; it is indexed under all of them, and a query reads it
as any of them (``core.ranking``). It is plain data here; ``scopemem.languages`` builds one
from the stopword and stemmer libraries. ``PLAIN`` has no languages: every word counts and
none is stemmed, the seed's tokens.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence

import attrs
import regex

__all__ = ["EVERY_STEM", "FOLDING", "PLAIN", "Analyzer", "distinct_tokens", "fold",
           "normalize_text", "script_of", "tokenize"]

#: The version of the folding and tokenizing rules; stored beside derived tokens.
FOLDING = "unicode-2"
#: The rule for a script several configured languages write: a word is indexed under its
#: stem in each of them (``Analyzer.stem_rule``).
EVERY_STEM = "every-stem"

_ASCII_TOKEN = re.compile(r"[a-z0-9]+")

# Combining marks that only decorate letters of the scripts below: removed by folding. The
# breve of Cyrillic "й" is kept: there it makes a letter of its own, which the Russian
# stemmer's endings are spelled with ("новый" must not become "новыи").
_DIACRITICS = regex.compile(
    r"(?:(?<!и)\u0306|[\u0300-\u0305\u0307-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670"
    r"\u06d6-\u06ed\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f])+")
_LETTERS = str.maketrans({"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d",
                          "þ": "th", "ı": "i"})
# A word: letters, digits and marks, no underscore.
_WORD = regex.compile(r"[\p{L}\p{N}\p{M}]+")
_UNSPACED = (r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}"
             r"\p{Myanmar}")
# Within a word, a run of unspaced-script characters (with their marks), or a run of others.
_PIECE = regex.compile(rf"(?:[{_UNSPACED}]\p{{M}}*)+|(?:(?![{_UNSPACED}])[\p{{L}}\p{{N}}\p{{M}}])+")
_UNSPACED_CHAR = regex.compile(rf"[{_UNSPACED}]\p{{M}}*")


def fold(text: str) -> str:
    """``text`` as matching compares it: case folded, diacritics removed, compatibility
    forms replaced by their plain letters (see the module docstring). Whitespace and
    punctuation are kept as they are."""
    if text.isascii():
        return text.lower()
    # Compatibility forms first (a full-width or mathematical capital becomes a plain one),
    # then case, then the decomposition again: casefolding can compose anew.
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    folded = _DIACRITICS.sub("", folded).translate(_LETTERS)
    # Recompose what NFKD split and folding kept (Hangul syllables, Indic clusters).
    return unicodedata.normalize("NFC", folded)


def tokenize(text: str) -> list[str]:
    """The folded words of ``text``, in order, repeats kept; a run of a script written
    without spaces gives its overlapping bigrams."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    tokens: list[str] = []
    for word in _WORD.findall(fold(text)):
        for piece in _PIECE.findall(word):
            if not _UNSPACED_CHAR.match(piece):
                tokens.append(piece)
                continue
            chars = _UNSPACED_CHAR.findall(piece)
            if len(chars) == 1:
                tokens.append(chars[0])
            else:
                tokens.extend(chars[n] + chars[n + 1] for n in range(len(chars) - 1))
    return tokens


def distinct_tokens(text: str) -> list[str]:
    """:func:`tokenize` with repeats removed, first occurrence kept: where a token's
    presence matters but not its frequency (query matching, keyword sets)."""
    return list(dict.fromkeys(tokenize(text)))


# A write reads each candidate's key several times (its lookup, its plan, the row it
# inserts): the keys of the last two batches' texts and rows are kept.
@functools.lru_cache(maxsize=256)
def normalize_text(text: str) -> str:
    """The dedup key of a record's text: folded as tokens are (case, diacritics, NFC and
    NFD alike), trimmed, every run of whitespace (anything ``str.isspace`` accepts) one
    space. Two texts that differ only there share a key, so a restated fact strengthens the
    record that says it instead of duplicating it."""
    return " ".join(fold(text).split())


# --- languages --------------------------------------------------------------------------------

_SCRIPTS = tuple((name, regex.compile(rf"\p{{Script={name}}}")) for name in (
    "Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Armenian", "Devanagari"))


def script_of(word: str) -> str | None:
    """The script of a word's first letter ("Latin", "Cyrillic", …), or None when it has no
    letter of a script a stemmer exists for (digits, CJK bigrams)."""
    if word.isascii():  # a letter is what changes case (a cheaper test than each char's)
        return "Latin" if word.lower() != word.upper() else None
    for char in word:
        if char.isalpha():
            for name, pattern in _SCRIPTS:
                if pattern.match(char):
                    return name
            return None
    return None


Stem = Callable[[str], str]
# How many words an analyzer remembers the stems of.
_STEM_CACHE = 65536


@attrs.frozen
class Analyzer:
    """How folded words become terms, for the languages a deployment speaks.

    ``stopwords`` are folded function words: a query drops them before it is matched or
    weighed (a record is never found by "the" or "und" alone). ``stemmers`` maps a script
    to the stem functions of the configured languages written in it, in the order they are
    listed; a word of a script no language covers is left whole. A word's stems are its
    stem under each of them, each once (``stems``). The stemmers see the folded word, the
    same on both sides of every match. ``signature`` names the rules, so a store that keeps
    terms re-derives them when they change."""

    languages: tuple[str, ...] = ()
    stopwords: frozenset[str] = frozenset()
    stemmers: Mapping[str, Sequence[Stem]] = attrs.field(factory=dict, eq=False, repr=False)
    #: How a word of a script several languages write is indexed (``EVERY_STEM``; "" when
    #: each script has one language); part of the signature.
    stem_rule: str = ""

    @property
    def signature(self) -> str:
        if not self.languages:
            return FOLDING
        rule = f";{self.stem_rule}" if self.stem_rule else ""
        return f"{FOLDING};{'+'.join(self.languages)}{rule}"

    _stems: dict[str, tuple[str, ...]] = attrs.field(factory=dict, init=False, eq=False,
                                                     repr=False)

    def stems(self, word: str) -> tuple[str, ...]:
        """The terms ``word`` (a folded word) stands for: its stem under each language of
        its script, first listed first, each once; the word itself when no language
        writes its script."""
        if not self.stemmers:
            return (word,)
        known = self._stems
        stemmed = known.get(word)
        if stemmed is None:
            script = script_of(word)
            stems = self.stemmers.get(script, ()) if script is not None else ()
            if len(stems) == 1:  # the common case, spelled out: a write stems every new word
                stemmed = (stems[0](word),)
            else:
                stemmed = tuple(dict.fromkeys(stem(word) for stem in stems)) or (word,)
            if len(known) >= _STEM_CACHE:
                known.clear()  # a bound, not an LRU: a full cache starts over
            known[word] = stemmed
        return stemmed

    def terms(self, text: str) -> list[str]:
        """What a record is indexed by: the stems of its words, in order, repeats kept."""
        if not self.stemmers:
            return tokenize(text)
        # The cache read inline (one dict look-up a word, no call): this runs for every
        # record written and every query.
        known, stems = self._stems.get, self.stems
        return [stem for word in tokenize(text) for stem in known(word) or stems(word)]

    def content_words(self, text: str) -> list[str]:
        """The distinct folded words of a query, function words dropped, in first-appearance
        order; empty when the query is made of function words only (no record is found by
        those alone)."""
        return list(dict.fromkeys(self.content_tokens(text)))

    def content_tokens(self, text: str) -> list[str]:
        """The folded words of a query, function words dropped, in order, repeats kept."""
        tokens = tokenize(text)
        if not self.stopwords:
            return tokens
        stopwords = self.stopwords
        return [word for word in tokens if word not in stopwords]


#: No languages: every word counts, none is stemmed.
PLAIN = Analyzer()
