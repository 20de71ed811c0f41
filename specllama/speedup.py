"""What speculative decoding should gain, from costs alone: Leviathan et al.
(2023), Theorem 3.8, with a measured (or assumed) verify cost. A draft step
costs t_draft, a (k+1)-row verify pass t_verify, one target-only step t_target:

    predicted = E[tokens per pass] * t_target / (k * t_draft + t_verify),
    E[tokens per pass] = (1 - a^(k+1)) / (1 - a)   (a: acceptance rate).

No numpy, no llama.cpp: ``specllama models --local`` ranks drafts with it
before any model loads.
"""

from __future__ import annotations

import functools

# What header_speedup assumes before anything is measured: a same-tokenizer pair's token acceptance
# (the papers' and llama.cpp's same-family pairs keep 0.6-0.8); it only ranks candidates,
# `specllama pair` measures them.
ASSUMED_ACCEPTANCE = 0.7
# A draft whose expected gain is below this is not proposed: a gain that small at the assumed
# acceptance is lost to a lower real one, and to the loop's own overhead.
MIN_EXPECTED_SPEEDUP = 1.1
HEADER_DRAFT_MAX = 8  # the draft lengths header_speedup tries: 1..this


def predicted_speedup(acceptance: float, k: float, t_target: float, t_draft: float, t_verify: float) -> float:
    """Leviathan et al. Thm 3.8 with a measured verify cost (see module doc);
    for the adaptive rows k is the mean draft length."""
    if k == 0 or t_verify <= 0:
        return 1.0
    expected = k + 1.0 if acceptance >= 1.0 else (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)
    return expected * t_target / (k * t_draft + t_verify)


@functools.lru_cache(maxsize=4096)  # a listing asks it for every pair of models, most of them alike
def header_speedup(cost_ratio: float, *, acceptance: float = ASSUMED_ACCEPTANCE,
                   draft_max: int = HEADER_DRAFT_MAX) -> tuple[float, int]:
    """The best expected speed-up, and its draft length, for a draft that costs
    ``cost_ratio`` times the target per token (bytes of weights read per token,
    from the headers), when verifying k+1 rows costs what one row does (decoding
    bound by memory, where drafting pays at all).

    Returns:
        (speed-up, k); (1.0, 0) when no k gains.
    """
    best = max(range(1, draft_max + 1), key=lambda k: predicted_speedup(acceptance, k, 1.0, cost_ratio, 1.0))
    gain = predicted_speedup(acceptance, best, 1.0, cost_ratio, 1.0)
    return (gain, best) if gain > 1.0 else (1.0, 0)
