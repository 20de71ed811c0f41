"""Logits processors: llama-cpp-python's ``(input_ids, scores) -> scores``
hooks, the repetition penalties and ``logit_bias`` written as processors,
and the one way a row is processed with the tokens before it.

The engine applies the processor to every target row and to every draft row,
each with the tokens before that row (draft tokens included, also ones that
are then rejected), so speculative output follows the *processed* target
distribution exactly.

The contract: a processor must be a pure function of ``(input_ids, scores)``.
It is called on draft rows and on rows whose tokens are later rejected, in no
promised order and possibly more than once for one position; a processor that
keeps state between calls (a counter, a grammar cursor) sees calls that plain
decoding would never make, and the output then follows no defined law.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from .errors import SpecLlamaError

#: (input_ids, scores) -> scores: llama-cpp-python's logits processor shape
Processor = Callable[[np.ndarray, np.ndarray], np.ndarray]

DEFAULT_PENALTY_LAST_N = 64  # llama.cpp's --repeat-last-n and llama-cpp-python's last_n_tokens_size


def processed(row: np.ndarray, prefix: Sequence[int], processor: Processor | None) -> np.ndarray:
    """A logits row after the processor, given the tokens before it (the
    processor gets copies: it may change them in place)."""
    if processor is None:
        return row
    return processor(np.asarray(prefix, dtype=np.intc), np.array(row, dtype=np.float32))


def penalties(
    *,
    repeat_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    last_n: int = DEFAULT_PENALTY_LAST_N,
) -> Processor | None:
    """llama.cpp's penalties over the last ``last_n`` tokens of the sequence
    (prompt included; 0: none): a seen token's logit is divided by
    ``repeat_penalty`` when positive and multiplied when negative, then
    lowered by ``frequency_penalty`` per occurrence and ``presence_penalty``
    once. The values are checked by :mod:`specllama.options`.

    Returns:
        the processor, or None when every penalty is neutral.
    """
    if last_n == 0 or (repeat_penalty == 1.0 and presence_penalty == 0.0 and frequency_penalty == 0.0):
        return None

    def apply(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        window = np.asarray(input_ids[-last_n:], dtype=np.int64)
        if window.size == 0:
            return scores
        ids, counts = np.unique(window, return_counts=True)
        ids, counts = ids[ids < scores.shape[0]], counts[ids < scores.shape[0]]
        seen = scores[ids]
        seen = np.where(seen > 0, seen / repeat_penalty, seen * repeat_penalty)
        scores[ids] = seen - counts * frequency_penalty - presence_penalty
        return scores

    return apply


def logit_bias(bias: Mapping[int, float] | None) -> Processor | None:
    """llama-cpp-python's ``logit_bias``: add ``bias[id]`` to that token's
    logit (ids and values checked by :mod:`specllama.options`)."""
    if not bias:
        return None
    ids = np.fromiter(bias.keys(), dtype=np.int64)
    values = np.fromiter(bias.values(), dtype=np.float32)

    def apply(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        scores[ids] += values
        return scores

    return apply


def ban(tokens: Sequence[int]) -> Processor | None:
    """Never sample these tokens (their logits become -inf): llama.cpp's
    ``--ignore-eos`` bans the end-of-generation tokens so."""
    if not tokens:
        return None
    ids = np.asarray(list(tokens), dtype=np.int64)

    def apply(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        scores[ids] = -np.inf
        return scores

    return apply


def chain(processors: Sequence[Processor | None]) -> Processor | None:
    """One processor that runs the given ones in order (None: none at all)."""
    active = [p for p in processors if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]

    def apply(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for p in active:
            scores = p(input_ids, scores)
        return scores

    return apply


def as_list(processors: object) -> list[Processor]:
    """A llama-cpp-python ``logits_processor`` argument (None, one callable,
    or a list such as ``LogitsProcessorList``) as a list."""
    if processors is None:
        return []
    if callable(processors) and not isinstance(processors, (list, tuple)):
        return [processors]  # type: ignore[list-item]
    items = list(processors)  # type: ignore[call-overload]
    for i, p in enumerate(items):
        if not callable(p):
            raise SpecLlamaError(f"logits_processor[{i}] must be a callable (input_ids, scores) -> scores, got {p!r}",
                                 param=f"logits_processor[{i}]")
    return items
