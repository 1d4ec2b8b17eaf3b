"""A SQL store's candidates (``shared.tokens.Candidates``) when records left active status
between the read of the postings and the read of their rows (a forget in another process):
the candidates are chosen again without them, so the retrieval reaches past them."""

from __future__ import annotations

import pytest

from scopemem.core.ranking import query_terms
from scopemem.stores.base import DEFAULT_RANKING
from scopemem.stores.shared.tokens import Candidates

NOW = 1_000_000


@pytest.mark.parametrize("few", [False, True])
def test_a_candidate_gone_meanwhile_is_replaced_by_the_next(few):
    ranking = DEFAULT_RANKING
    terms = query_terms("vpn deploys", ranking.analyzer)
    vpn, deploys = (" ".join(ranking.analyzer.stems(word)) for word in ("vpn", "deploys"))
    # 1 holds both terms: the best answer, until it is forgotten meanwhile.
    postings = {vpn: {1, 2, 3}, deploys: {1}}
    choice: Candidates[int] = Candidates(postings, set(), terms, 1, ranking, 3, NOW, few=few)
    assert 1 in choice.wanted
    answers = [choice.found({seq: (NOW, seq) for seq in choice.wanted if seq != 1})]
    while not answers[-1] and len(answers) < 5:
        assert 1 not in choice.wanted
        answers.append(choice.found({seq: (NOW, seq) for seq in choice.wanted}))
    assert answers[0] is False and answers[-1] is True
    [(seq, _match)] = choice.ranked()
    assert seq in (2, 3)
