"""Reusing what a KV cache already holds."""

from __future__ import annotations

from typing import Sequence


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def sync_prefix(model, seq: Sequence[int]) -> int:
    """Make the cache hold exactly ``seq``, reusing the longest shared prefix.

    Returns:
        how many tokens had to be evaluated.
    """
    keep = common_prefix_len(model.tokens, seq)
    model.rewind(keep)
    if len(seq) > keep:
        model.eval(seq[keep:], n_logits=0)
    return len(seq) - keep
