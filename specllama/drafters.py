"""Where draft tokens come from: a draft model, or n-gram lookup in the text.

A drafter proposes up to k tokens after a sequence, each with the
distribution it was drawn from, and learns how much of its proposal was kept.
The engine verifies whatever it proposes with the same exact rule.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

import numpy as np

from .errors import ContextFull
from .prefix import sync_prefix
from .processors import Processor, processed
from .sampling import SamplingParams, SparseProbs, UniformSource, one_hot, sparse_probs_or_none

PROMPT_LOOKUP = "prompt-lookup"
LOOKUP_MAX_NGRAM = 3
LOOKUP_MIN_NGRAM = 1


class Drafter(Protocol):
    n_ctx: int

    def propose(self, seq: list[int], k: int, params: SamplingParams, rng: np.random.Generator | UniformSource,
                processor: Processor | None, n_vocab: int) -> tuple[list[int], list[SparseProbs]]: ...

    def keep(self, n_keep: int) -> None: ...

    def prefill(self, tokens: Sequence[int], reuse: int = 0) -> None: ...


class ModelDrafter:
    """Draft autoregressively with a smaller model that keeps its own KV cache
    (it only ever evaluates tokens its cache lacks). ``first_step_seconds``:
    the last proposal's first step, timed (it evaluates what the cache lacks,
    two tokens after a pass that kept all its drafts: the draft-length policy
    counts it apart)."""

    def __init__(self, model, clock: Callable[[], float] = time.perf_counter) -> None:
        self.model = model
        self.n_ctx = model.n_ctx
        self.clock = clock
        self.first_step_seconds: float | None = None

    def prefill(self, tokens: Sequence[int], reuse: int = 0) -> None:
        if len(tokens) <= self.n_ctx:  # a prompt the draft cannot hold: it will not draft
            try:
                sync_prefix(self.model, tokens, reuse)
            except ContextFull:
                pass  # parallel slots' shared cache is full: the draft stays behind, and drafts nothing



    def propose(self, seq, k, params, rng, processor, n_vocab):
        draft = self.model
        tokens: list[int] = []
        dists: list[SparseProbs] = []
        # tokens the cache lacks (a draft that fell behind: the engine catches it up and times that
        # before proposing) are evaluated with the first step
        self.first_step_seconds = None
        t0 = self.clock()
        for _ in range(k):
            have = len(draft.tokens)
            pending = seq[have:] + tokens if have <= len(seq) else tokens[have - len(seq):]
            try:
                row = draft.eval(pending, n_logits=1, copy=False)[0]
            except ContextFull:
                break  # parallel slots' shared cache is full (their state, not this pass's draws): drafting stops
            row = processed(_fit_vocab(row, n_vocab), seq + tokens if processor else (), processor)
            q = sparse_probs_or_none(row, params)
            if q is None:
                break  # nothing is allowed here (a grammar's mask): drafting stops
            x = q.sample(rng.random())
            tokens.append(x)
            dists.append(q)
            if self.first_step_seconds is None:
                self.first_step_seconds = self.clock() - t0
            if draft.is_eog(x):
                break  # nothing is drafted past an end of generation
        return tokens, dists

    def keep(self, n_keep: int) -> None:
        self.model.rewind(min(len(self.model.tokens), n_keep))


class PromptLookupDrafter:
    """Draft by copying: find the latest earlier occurrence of the last n
    tokens (n = 3, 2, 1) and propose what followed it. The proposal is a
    fixed function of the text, so its distribution is one-hot: the
    acceptance test becomes u < p(x), and the residual is p without x."""

    n_ctx = 1 << 62  # no cache, no limit

    def __init__(self, max_ngram: int = LOOKUP_MAX_NGRAM, min_ngram: int = LOOKUP_MIN_NGRAM) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def prefill(self, tokens: Sequence[int], reuse: int = 0) -> None:
        pass

    def keep(self, n_keep: int) -> None:
        pass

    def lookup(self, seq: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier match of seq's tail."""
        return self.match(seq, k)[0]

    def match(self, seq: Sequence[int], k: int) -> tuple[list[int], int]:
        """:meth:`lookup`'s tokens, and the length n of the n-gram that
        matched (0: none did)."""
        arr = np.asarray(seq)
        n_seq = arr.shape[0]
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            tail = arr[n_seq - n:]
            # windows starting at 0 .. n_seq - n - 1 (not the tail itself)
            windows = np.lib.stride_tricks.sliding_window_view(arr[: n_seq - 1], n)
            hits = np.flatnonzero((windows == tail).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return [int(t) for t in arr[start: start + k]], n
        return [], 0

    def propose(self, seq, k, params, rng, processor, n_vocab):
        tokens = self.lookup(seq, k)
        return tokens, [one_hot(t) for t in tokens]


def _fit_vocab(logits: np.ndarray, n_vocab: int) -> np.ndarray:
    """Draft logits over the target's vocabulary: ids the target lacks are
    cut, ids the draft lacks (padding) get -inf."""
    if logits.shape[0] == n_vocab:
        return logits
    if logits.shape[0] > n_vocab:
        return logits[:n_vocab]
    out = np.full(n_vocab, -np.inf, dtype=logits.dtype)
    out[: logits.shape[0]] = logits
    return out
