"""Prompt-lookup drafts mixed with a draft model's, chosen per pass.

In code the text to write often stands already in the prompt (the prefix,
the suffix, other files of the request) or earlier in the output. Before
each pass, where the sequence's tail (its last 3, 2 or 1 tokens) occurred
before, the tokens that followed that occurrence are a candidate draft: it
costs no draft steps, only target rows. :class:`LookupMix` takes it instead
of the draft model's drafts when, at its estimated acceptance and the
target's measured costs (the draft-length policy's), it promises more tokens
per second than the draft model's choice for this pass.

Exactness: the choice reads the committed sequence and past passes only
(the policy's costs and this module's acceptance records), never this pass's
target rows or draws. A lookup draft is a fixed function of the sequence, so
its distribution is one-hot, and the engine's acceptance rule is exact for
any draft distribution.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .drafters import LOOKUP_MAX_NGRAM, PromptLookupDrafter
from .policy import expected_tokens

MIX_PRIOR_ACCEPT = 0.5  # acceptance of a lookup draft assumed before any is observed
MIX_PRIOR_WEIGHT = 4.0  # the prior counts as this many tried positions
MIX_DECAY = 0.95  # at each pass with a match, a record fades by this factor (toward the prior)


class LookupMix:
    """Per matched n-gram length n, a decayed record of lookup drafts tried
    and kept, and the per-pass choice it implies."""

    def __init__(self, lookup: PromptLookupDrafter | None = None) -> None:
        self.lookup = lookup or PromptLookupDrafter()
        self.tried = [0.0] * (LOOKUP_MAX_NGRAM + 1)
        self.accepted = [0.0] * (LOOKUP_MAX_NGRAM + 1)
        self._n = 0  # the n-gram length of the lookup drafts now being verified
        self.n_passes = 0  # passes that verified lookup drafts

    def acceptance(self, n: int) -> float:
        """Estimated P(a lookup draft after an n-gram match is kept | the drafts before it were)."""
        return (self.accepted[n] + MIX_PRIOR_ACCEPT * MIX_PRIOR_WEIGHT) / (self.tried[n] + MIX_PRIOR_WEIGHT)

    def plan(self, seq: Sequence[int], cap: int, policy, model_k: int,
             is_eog: Callable[[int], bool] = lambda _: False) -> list[int]:
        """The lookup drafts to verify in this pass (empty: the draft model's
        ``model_k`` drafts, or target-only).

        Args:
            seq: the committed sequence (prompt and output so far).
            cap: the most drafts this pass has room for.
            policy: the draft-length policy, whose ``rate(k)`` (tokens per
                second of the draft model at k) and ``verify_cost(rows)`` are
                its measurements of past passes.
            model_k: the draft model's draft length chosen for this pass.
            is_eog: whether a token ends generation: nothing is drafted past
                one (as the draft model stops there).
        """
        if cap <= 0:
            return []
        tokens, n = self.lookup.match(seq, cap)
        if not tokens:
            return []
        ends = [i for i, t in enumerate(tokens) if is_eog(t)]
        tokens = tokens[:ends[0] + 1] if ends else tokens
        self._n = n
        # every match fades its record toward the prior, so a verdict of old text is forgotten in time
        self.tried[n] *= MIX_DECAY
        self.accepted[n] *= MIX_DECAY
        if policy.verify_cost(1) <= 0:  # nothing timed yet: lookup drafts cost no draft steps, take them
            return tokens
        a = self.acceptance(n)
        best_m, best = 0, policy.rate(model_k)
        for m in range(1, len(tokens) + 1):
            rate = expected_tokens([a] * m, m) / policy.verify_cost(m + 1)
            if rate > best:
                best_m, best = m, rate
        return tokens[:best_m]

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """The lookup drafts of the last :meth:`plan`: positions 0..n_accepted
        were tried (the last rejected unless all were kept)."""
        n = self._n
        self.n_passes += 1
        self.tried[n] += min(n_accepted + 1, n_drafted)
        self.accepted[n] += n_accepted
