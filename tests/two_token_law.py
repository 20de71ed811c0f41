"""The first two tokens of many seeded runs, jointly, against the law
enumerated from the target's own logits (the same processor and sampling
transforms applied): the exactness check of tests/test_engine_llama.py, also
run through RPC (tests/test_rpc.py). Each use states the smallest bias it
detects: Cohen's w (see tests/stats_helpers.py) that the chi-square check
rejects with power 0.99 at ALPHA = 1e-4, for its N and its number of bins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specllama.processors import processed
from specllama.sampling import SamplingParams, to_probs

from .stats_helpers import assert_distributed_as, detectable_effect, pooled_bins

PROMPT = "once upon a time there lived a king"
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.02)
N_RUNS = 3000
EOS = 2  # the tiny vocabulary's only end-of-generation token


def next_token_law(model, prefix, params, processor) -> np.ndarray:
    """A model's sampling distribution after ``prefix``, from a fresh evaluation."""
    model.rewind(0)
    row = model.eval(prefix, n_logits=1)[0]
    return to_probs(processed(row, prefix, processor), params)


@dataclass
class TwoTokenBins:
    """Bins for (first, second) token: (t1, t2) for each likely t1; then
    "EOS first"; then "any other t1", pooled."""

    likely: list[int]
    n_vocab: int

    def index(self, t1: int, t2: int | None) -> int:
        if t1 == EOS:
            return len(self.likely) * self.n_vocab
        if t1 in self._at:
            return self._at[t1] * self.n_vocab + t2
        return len(self.likely) * self.n_vocab + 1

    def __post_init__(self) -> None:
        self._at = {t1: i for i, t1 in enumerate(self.likely)}

    def law(self, first: np.ndarray, second: dict[int, np.ndarray]) -> np.ndarray:
        """The joint law on these bins, from the first token's law and the
        second's given each likely first."""
        rest = max(0.0, 1.0 - first[self.likely].sum() - first[EOS])
        return np.concatenate([first[t1] * second[t1] for t1 in self.likely] + [[first[EOS], rest]])


def two_token_law(engine, params, processor, n_runs, next_law=lambda p_target, q_draft: p_target):
    """The bins, and the joint law of the first two tokens on them.

    ``next_law(p_target, q_draft)`` maps the target's and the draft's
    distributions at one context to the law the engine's next token follows
    there (the target's own, for an exact engine). Both are enumerated from
    the models' logits with the same processor and transforms."""
    target, draft = engine.target, engine.draft
    prompt = target.tokenize(PROMPT)
    p1 = next_token_law(target, prompt, params, processor)
    likely = [int(t) for t in np.flatnonzero(p1 * n_runs >= 0.5) if t != EOS]
    bins = TwoTokenBins(likely, target.n_vocab)

    def law_at(prefix):
        return next_law(next_token_law(target, prefix, params, processor),
                        next_token_law(draft, prefix, params, processor))

    return bins, bins.law(law_at(prompt), {t1: law_at(prompt + [t1]) for t1 in likely})


def first_two_tokens(engine, prompt_tokens, rng, *, params, processor, rule, adaptive, draft_max=3):
    """The first two tokens of one run; after an EOS first token, (EOS, None).
    (max_tokens=3: the first pass drafts 2 tokens, a second pass 1.)"""
    out: list[int] = []
    steps = engine.steps(prompt_tokens, params=params, draft_max=draft_max, max_tokens=3, rng=rng,
                         adaptive=adaptive, processor=processor, rule=rule)
    for step in steps:
        out.extend(step.tokens)
        if step.finish_reason == "stop":
            out.append(EOS)
        if len(out) >= 2 or step.finish_reason:
            break
    steps.close()
    return out[0], (out[1] if out[0] != EOS else None)


def two_token_counts(engine, bins, n_runs, *, seed=2024, params=PLAIN, processor=None, rule="token",
                     adaptive=False):
    prompt = engine.target.tokenize(PROMPT)
    counts = np.zeros(len(bins.likely) * bins.n_vocab + 2, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(n_runs):
        counts[bins.index(*first_two_tokens(engine, prompt, rng, params=params, processor=processor, rule=rule,
                                            adaptive=adaptive))] += 1
    return counts


def detectable(expected: np.ndarray, n: int) -> float:
    """The smallest w the check on these bins detects at n with power 0.99."""
    return detectable_effect(n, len(pooled_bins(expected, n)) - 1)


def check_exact(engine, *, w_bound, params=PLAIN, processor=None, rule="token", adaptive=False, n_runs=N_RUNS):
    bins, expected = two_token_law(engine, params, processor, n_runs)
    assert detectable(expected, n_runs) <= w_bound  # the power the docstring claims
    counts = two_token_counts(engine, bins, n_runs, params=params, processor=processor, rule=rule,
                              adaptive=adaptive)
    assert_distributed_as(counts, expected)
    return expected
