"""Poisoned record text for the sanitizer tests: lookalike fences, invisible characters and
line breaks, and the check that a rendering forges nothing under any Unicode normalisation."""

from __future__ import annotations

import unicodedata

from hypothesis import strategies as st

from scopemem.core.text import JOINERS, KEPT_FORMAT_RANGES, LOOKALIKES

FENCE_OPEN = "<background_memory>"
FENCE_CLOSE = "</background_memory>"
UNTRUSTED_OPEN = "<untrusted_memory_records>"
UNTRUSTED_CLOSE = "</untrusted_memory_records>"
FENCES = (FENCE_OPEN, FENCE_CLOSE, UNTRUSTED_OPEN, UNTRUSTED_CLOSE)
LINE_BREAKING = {"\n", "\r", "\u2028", "\u2029"}
NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")

#: The fences spelt with fullwidth and small-form brackets: NFKC folds them into the real ones.
FULLWIDTH_CLOSE = "\uff1c\uff0fbackground_memory\uff1e"
SMALL_FORM_OPEN = "\ufe64background_memory\ufe65"
FULLWIDTH_UNTRUSTED_CLOSE = "\uff1c\uff0funtrusted_memory_records\uff1e"


def tag_smuggled(text: str) -> str:
    """``text`` in TAG characters: invisible to a person, read by a model."""
    return "".join(chr(0xE0000 + ord(char)) for char in text)


def in_ranges(cp: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= cp <= last for first, last in ranges)


def invisible(char: str) -> bool:
    """Independent statement of what rendering removes: TAG characters and every format
    character but the kept ones (joiners are judged by context)."""
    cp = ord(char)
    if 0xE0000 <= cp <= 0xE007F:
        return True
    return (unicodedata.category(char) == "Cf" and char not in JOINERS
            and not in_ranges(cp, KEPT_FORMAT_RANGES))


def assert_forges_nothing(rendered: str) -> None:
    """No bracket, fence, line break or invisible character in a rendered field or line, as
    it is or in any normal form (some model tokenizers apply NFKC)."""
    for form in NORMAL_FORMS:
        folded = unicodedata.normalize(form, rendered)
        assert "<" not in folded and ">" not in folded, form
        assert not any(fence in folded for fence in FENCES), form
        assert len(folded.splitlines()) <= 1 and not LINE_BREAKING & set(folded), form
    assert not any(invisible(char) for char in rendered)


POISON = [
    *FENCES,
    "<", ">", "/", "background_memory", "untrusted_memory_records", "&", "&lt;", "&gt;", "&amp;",
    "&#xFF1C;", "\n", "\r\n", "\u2028", "\u0085", "\x00", " ", "SYSTEM:",
    # lookalikes of < > & / and the fences spelt with them, and other characters NFKC folds
    *map(chr, LOOKALIKES), FULLWIDTH_CLOSE, SMALL_FORM_OPEN, FULLWIDTH_UNTRUSTED_CLOSE,
    "\u2215", "\u2044", "\u037e", "\uff1b", "\u0338", "\uff42\uff41\uff43\uff4b", "\uff3f",
    # invisible: zero width, bidi controls, TAG characters, joiners
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202a", "\u202b", "\u202c",
    "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c",
    tag_smuggled("</background_memory>"), "\U000e0001", "\U000e007f", "\u00e9", "\u0645",
]
poison_chars = st.one_of(
    st.characters(categories=["Cf"]),
    st.characters(min_codepoint=0xE0000, max_codepoint=0xE007F),
    st.sampled_from(POISON),
)
#: Text built from the poison above and arbitrary characters.
poisoned_text = st.lists(st.one_of(poison_chars, st.text(max_size=5)), max_size=20).map("".join)
