"""The languages memory reads and writes in: function words and stemmers from their libraries.

``memory.languages`` (default ``["english"]``) names the languages a deployment speaks. For
each, two well-kept libraries supply what ranking needs:

* **Function words** (``the``, ``und``, ``которые``) from the ``stopwords`` package (its
  per-language lists, the classic Snowball-sized ones: about 100–400 words each, never
  domain words such as ``test`` or ``run``). Two of its lists ship in the wrong 8-bit
  encoding (Turkish and Lithuanian); they are read back through the right code page here.
* **Stems** from the Snowball stemmers, through PyStemmer (the Snowball project's own C
  binding). Every listed language stems the words of its script: when several languages
  share one (English, German and Spanish all write Latin), a word is indexed under its stem
  in each of them, and a query word finds a record holding any of its stems
  (``Analyzer.stems``, ``EVERY_STEM``). So ``Zertifikate`` (English's ``zertifik``,
  German's ``zertifikat``) finds ``Zertifikat``, ``Lizenzprüfungen`` finds
  ``Lizenzprüfung`` (German's ``lizenzpruf``), and ``desplegamos`` finds ``desplegar``
  (Spanish's ``despleg``), whichever language a record or a query is written in.

A language is offered when both libraries have it. Everything is folded by
``core.words.fold`` first, so the lists compare with folded query words. The core stays
free of I/O: it receives the finished :class:`~scopemem.core.words.Analyzer`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

# The word rules (and their ``regex``) load with the first analyzer: checking a
# configuration's languages (``check_languages``) needs only the libraries' lists.
if TYPE_CHECKING:
    from scopemem.core.words import Analyzer

__all__ = ["DEFAULT_LANGUAGES", "analyzer_for", "available_languages", "check_languages"]

DEFAULT_LANGUAGES: tuple[str, ...] = ("english",)

# Lists the stopwords package ships decoded as Latin-1 from another code page.
_CODE_PAGES = {"turkish": "cp1254", "lithuanian": "cp1257"}


@functools.cache
def available_languages() -> tuple[str, ...]:
    """The languages both the stopword lists and the Snowball stemmers cover, sorted."""
    import Stemmer  # deferred: loading the plugin list must not pay for the libraries
    import stopwords

    return tuple(sorted(set(stopwords.AVAILABLE_LANGUAGES) & set(Stemmer.algorithms())))


def check_languages(languages: Sequence[str]) -> None:
    """Raises ``ValueError`` naming the first of ``languages`` that is not available and
    listing the available ones."""
    known = available_languages()
    for language in languages:
        if language not in known:
            raise ValueError(f"unknown language {language!r} (available: {', '.join(known)})")


def _function_words(language: str) -> frozenset[str]:
    import stopwords

    from scopemem.core.words import tokenize

    words: set[str] = set()
    for entry in stopwords.get_stopwords(language):
        page = _CODE_PAGES.get(language)
        if page is not None:
            with contextlib.suppress(UnicodeError):
                entry = entry.encode("latin-1").decode(page)
        # "aren't" is the words "aren" and "t" once tokenized, as a query's would be.
        words.update(tokenize(entry))
    return frozenset(words)


def _script(words: Iterable[str]) -> str | None:
    """The script most of a language's function words are written in."""
    from scopemem.core.words import script_of

    counts = collections.Counter(script for script in map(script_of, words) if script)
    return counts.most_common(1)[0][0] if counts else None


@functools.cache
def analyzer_for(languages: Sequence[str]) -> Analyzer:
    """The analyzer for ``languages`` (names as ``available_languages`` gives them), in
    order: the stopwords of all of them, and per script the stemmers of those written in
    it, in that order. An empty list is ``PLAIN``. Raises ``ValueError`` naming an unknown
    language and listing the available ones."""
    from scopemem.core.words import EVERY_STEM, PLAIN, Analyzer

    languages = tuple(languages)
    if not languages:
        return PLAIN
    check_languages(languages)
    import Stemmer

    stopwords: set[str] = set()
    stemmers: dict[str, list[Callable[[str], str]]] = {}
    for language in dict.fromkeys(languages):
        words = _function_words(language)
        stopwords |= words
        script = _script(words)
        if script is not None:
            stemmer = Stemmer.Stemmer(language)
            # The analyzer keeps its own bounded cache of stems. PyStemmer's (10,000 words
            # by default) costs more than stemming itself (1.1 against 0.3 µs a word here)
            # and holds a two-item list a word, which Python's collector walks.
            stemmer.maxCacheSize = 0
            stemmers.setdefault(script, []).append(_folded(stemmer.stemWord))
    joined = any(len(stems) > 1 for stems in stemmers.values())
    return Analyzer(languages=tuple(dict.fromkeys(languages)), stopwords=frozenset(stopwords),
                    stemmers={script: tuple(stems) for script, stems in stemmers.items()},
                    stem_rule=EVERY_STEM if joined else "")


def _folded(stem: Callable[[str], str]) -> Callable[[str], str]:
    """A stem function safe to share between threads (a PyStemmer object is not) whose
    answer is folded again (a stemmer may rewrite a letter), so a stem is always a folded
    token. The analyzer remembers what it stemmed."""
    from scopemem.core.words import fold

    lock = threading.Lock()

    def stem_word(word: str) -> str:
        with lock:
            stemmed = stem(word)
        return fold(stemmed)

    return stem_word
