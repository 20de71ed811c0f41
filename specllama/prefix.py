"""Reusing what a KV cache already holds."""

from __future__ import annotations

from typing import Sequence


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def keep_reusable(model, seq: Sequence[int], reuse: int = 0) -> int:
    """Drop from the cache what ``seq`` cannot reuse: all but the longest
    shared prefix (with ``reuse`` > 0, the model's ``reuse`` first shifts
    cached runs of at least that many tokens further on into place).

    Returns:
        how many tokens at the start of ``seq`` the cache now holds.
    """
    if reuse > 0 and hasattr(model, "reuse"):
        keep = model.reuse(seq, reuse)
    else:
        keep = common_prefix_len(model.tokens, seq)
    model.rewind(keep)
    return keep


def sync_prefix(model, seq: Sequence[int], reuse: int = 0) -> int:
    """Make the cache hold exactly ``seq``, reusing what it can (:func:`keep_reusable`).

    Returns:
        how many tokens had to be evaluated.
    """
    keep = keep_reusable(model, seq, reuse)
    if len(seq) > keep:
        model.eval(seq[keep:], n_logits=0)
    return len(seq) - keep
