"""The semantic lane's half of the read: how a record's cosine joins its keyword match.

With ``memory.embeddings`` set, every scope hands the read two lists: its keyword hits
(``ranking``: each with its match, in [0, 1]) and its dense candidates, the records whose
vector's cosine with the query's is at least the model's floor, each hit's cosine known
too. The pool of both is scored as the keyword pool is, with the match replaced by a blend:

    score = 0.7 × ((1 − s) × match + s × cosine) + 0.3 × recency,   s = SEMANTIC_SHARE

so a paraphrase that shares no word with its record (match 0) ranks by its cosine, and a
hit that shares words but says something else loses the part its cosine does not give.
A record is *relevant* (the gate, as the seed has it: a keyword match, or a cosine of at
least the floor) when its match is positive and at least ``min_match`` (and its cosine at
least ``hit_floor``, 0 unless a benchmark sets it), or its cosine reaches the floor.

A brief of more than ``LONG_BRIEF_WORDS`` words (a pasted log, a stack trace) is read by
keyword alone (``semantic_reads``): its one vector is about its many routine lines, not the
line that matters, and on the lessons set's dev half the blend lost half the pasted-log
targets the keyword read finds (docs/memory.md "The semantic lane").

Pure: the stores and the host hand in numbers and text, nothing here reads a clock or a
vector.
"""

from __future__ import annotations

import attrs

__all__ = ["LONG_BRIEF_WORDS", "SEMANTIC_SHARE", "Fusion", "fused_match", "semantic_reads"]

#: The cosine's share of the blended match (chosen on the dev halves of LoCoMo and the
#: lessons set: docs/memory.md "The semantic lane").
SEMANTIC_SHARE = 0.4


#: The most words a brief may have for the semantic lane to read it (chosen on the dev half:
#: one-liners and paraphrases are under 30 words, a pasted screenful of log is hundreds).
LONG_BRIEF_WORDS = 64


def semantic_reads(brief: str) -> bool:
    """Whether the semantic lane reads for ``brief``: one to ``LONG_BRIEF_WORDS``
    whitespace-separated words (a blank brief asks for nothing: its vector would be the
    embedder's idea of no text, near whatever it likes)."""
    return 0 < len(brief.split(None, LONG_BRIEF_WORDS)) <= LONG_BRIEF_WORDS


def fused_match(match: float, cosine: float, share: float = SEMANTIC_SHARE) -> float:
    """The blend that stands for the match in the score; a negative cosine counts as 0."""
    return (1.0 - share) * match + share * (cosine if cosine > 0.0 else 0.0)


@attrs.frozen
class Fusion:
    """The lane's settings as the read applies them: ``floor`` lets a record in by its
    cosine alone; ``hit_floor`` is the least cosine a keyword hit needs to stay in (0, as
    the configuration leaves it: the benchmarks' ``--hit-floor`` measures the trade)."""

    floor: float
    hit_floor: float = 0.0
    share: float = SEMANTIC_SHARE

    def relevant(self, match: float, cosine: float, min_match: float = 0.0) -> bool:
        if cosine >= self.floor:
            return True
        return match > 0.0 and min_match <= match and cosine >= self.hit_floor

    def match(self, match: float, cosine: float) -> float:
        return fused_match(match, cosine, self.share)
