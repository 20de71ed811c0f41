"""Logits processors: llama-cpp-python's ``(input_ids, scores) -> scores``
hooks, and the repetition penalties written as one.

The engine applies a processor to every target row and to every draft row
with the tokens before that row, so speculative output follows the
*processed* target distribution exactly.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Processor = Callable[[np.ndarray, np.ndarray], np.ndarray]

DEFAULT_PENALTY_LAST_N = 64  # llama-cpp-python's last_n_tokens_size


def penalties(
    *,
    repeat_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    last_n: int = DEFAULT_PENALTY_LAST_N,
) -> Processor | None:
    """llama.cpp's penalties over the last ``last_n`` tokens of the sequence
    (prompt included): a seen token's logit is divided by ``repeat_penalty``
    when positive and multiplied when negative, then lowered by
    ``frequency_penalty`` per occurrence and ``presence_penalty`` once.

    Returns:
        the processor, or None when every penalty is neutral.
    """
    if not (isinstance(repeat_penalty, (int, float)) and repeat_penalty > 0):
        raise ValueError(f"repeat_penalty must be a number > 0 (1 = off), got {repeat_penalty!r}")
    if not (isinstance(last_n, int) and last_n >= 0):
        raise ValueError(f"last_n must be an integer >= 0, got {last_n!r}")
    if repeat_penalty == 1.0 and presence_penalty == 0.0 and frequency_penalty == 0.0:
        return None

    def apply(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        window = np.asarray(input_ids[-last_n:] if last_n else input_ids[:0], dtype=np.int64)
        if window.size == 0:
            return scores
        ids, counts = np.unique(window, return_counts=True)
        ids, counts = ids[ids < scores.shape[0]], counts[ids < scores.shape[0]]
        seen = scores[ids]
        seen = np.where(seen > 0, seen / repeat_penalty, seen * repeat_penalty)
        scores[ids] = seen - counts * frequency_penalty - presence_penalty
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
