"""Reusing what a KV cache already holds."""

from __future__ import annotations

from typing import Sequence


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def sync_prefix(model, seq: Sequence[int], reuse: int = 0) -> int:
    """Make the cache hold exactly ``seq``, reusing the longest shared prefix
    (and with ``reuse`` > 0, the model's ``reuse``: cached runs of at least
    that many tokens further on, shifted into place).

    Returns:
        how many tokens had to be evaluated.
    """
    if reuse > 0 and hasattr(model, "reuse"):
        keep = model.reuse(seq, reuse)
    else:
        keep = common_prefix_len(model.tokens, seq)
    model.rewind(keep)
    if len(seq) > keep:
        model.eval(seq[keep:], n_logits=0)
    return len(seq) - keep
