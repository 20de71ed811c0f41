"""Block and token-wise acceptance written from their formulas, over a tiny
context-dependent table pair: the exact laws that the enumeration tests
(test_block_verify, test_constraint_law) compare the code's with."""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from specllama.sampling import SamplingParams

V = 5  # tokens 0..4
EOG = 4  # the end-of-generation token, where a case has one
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplingParams(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05)
EXACT = 1e-12

# A law over outputs: sequence of tokens -> probability.
Law = dict[tuple[int, ...], float]
# A rule's law for one draft: (n_accepted, next_token) -> probability.
Outcomes = dict[tuple[int, int], float]



@functools.lru_cache(maxsize=None)
def _logits(seed: int, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(target, draft) logits after ``prefix``: seeded by the prefix itself,
    the draft a noisy copy of the target."""
    rng = np.random.default_rng([seed, len(prefix), *prefix])
    target = rng.normal(0.0, 1.5, V)
    return target, target + rng.normal(0.0, 1.0, V)



def residual_row(p_row: np.ndarray, q_row: np.ndarray, scale: float) -> np.ndarray:
    """normalize(max(0, scale * p - q)); p itself when that has no mass."""
    r = np.maximum(scale * p_row - q_row, 0.0)
    return r / r.sum() if r.sum() > 0 else p_row


def tokenwise_law(p_target: np.ndarray, q_draft: np.ndarray, draft: tuple[int, ...]) -> Outcomes:
    """The token-wise rule's law of (n_accepted, next_token), from its formula:
    accept x_i with min(1, p/q) until the first rejection, then the residual."""
    out: Outcomes = defaultdict(float)
    alive = 1.0  # P(every token before i accepted)
    for i, x in enumerate(draft):
        a = min(1.0, p_target[i, x] / q_draft[i, x]) if q_draft[i, x] > 0 else 0.0
        for t, r in enumerate(residual_row(p_target[i], q_draft[i], 1.0)):
            if r > 0:
                out[(i, t)] += alive * (1.0 - a) * r
        alive *= a
    k = len(draft)
    for t, r in enumerate(p_target[k]):
        if r > 0:
            out[(k, t)] += alive * r
    return out


def block_weights(
    p_target: np.ndarray, q_draft: np.ndarray, draft: tuple[int, ...], h_scale: float = 1.0
) -> tuple[list[float], list[float]]:
    """([P_0..P_k], [h_0..h_k]) from the paper's formulas (rows 0-based:
    p_target[i] is p_{i+1}); ``h_scale`` plants a bias into h_1..h_k."""
    k = len(draft)
    kept = [1.0]
    for i, x in enumerate(draft):
        kept.append(min(1.0, kept[-1] * p_target[i, x] / q_draft[i, x]) if q_draft[i, x] > 0 else 0.0)
    h = [1.0]
    for i in range(1, k):
        z = float(np.maximum(kept[i] * p_target[i] - q_draft[i], 0.0).sum())
        den = z + 1.0 - kept[i]
        h.append(h_scale * (1.0 if den == 0 else z / den))
    if k:
        h.append(h_scale * kept[k])
    return kept, h


def tau_law(h: list[float]) -> list[float]:
    """P(tau = i) = h_i * prod_{j > i} (1 - h_j), tau the largest i with u_i < h_i."""
    return [h[i] * float(np.prod([1.0 - hj for hj in h[i + 1:]])) for i in range(len(h))]


def block_law(p_target: np.ndarray, q_draft: np.ndarray, draft: tuple[int, ...], h_scale: float = 1.0) -> Outcomes:
    """Block verification's law of (n_accepted, next_token), from its formula."""
    k = len(draft)
    kept, h = block_weights(p_target, q_draft, draft, h_scale)
    out: Outcomes = defaultdict(float)
    for tau, pr in enumerate(tau_law(h)):
        row = p_target[k] if tau == k else residual_row(p_target[tau], q_draft[tau], kept[tau])
        for t, r in enumerate(row):
            if r > 0 and pr > 0:
                out[(tau, t)] += pr * r
    return out



def assert_same_law(a: Law | Outcomes, b: Law | Outcomes, tol: float = EXACT) -> None:
    keys = set(a) | set(b)
    worst = max(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in keys)
    assert worst < tol, f"laws differ by {worst:.3g}"
    assert abs(sum(a.values()) - 1.0) < tol and abs(sum(b.values()) - 1.0) < tol
