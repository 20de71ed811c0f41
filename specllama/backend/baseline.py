"""The honest baseline: llama-cpp-python's own ``Llama.create_completion`` on
the target, on the very same llama.cpp context, as a user runs it today."""

from __future__ import annotations

import time
from typing import Sequence

from .model import LlamaModel


def plain_completion(
    model: LlamaModel,
    prompt_tokens: Sequence[int],
    *,
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int,
) -> tuple[int, float]:
    """Generate with ``Llama.create_completion`` and time it.

    The prompt is evaluated first, untimed (llama-cpp-python then reuses it
    from its cache and evaluates only the last prompt token again, as
    specllama's decoding does after its prefill), so the time is decoding
    alone. The cache is left empty for specllama's own bookkeeping.

    Returns:
        (tokens generated, seconds).
    """
    llama = model.llama
    model.clear()
    options = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=1.0, seed=seed)
    try:
        llama.create_completion(list(prompt_tokens), max_tokens=1, **options)  # the prompt into its cache
        t0 = time.perf_counter()
        out = llama.create_completion(list(prompt_tokens), max_tokens=max_tokens, **options)
        seconds = time.perf_counter() - t0
    finally:
        model.clear()
    return int(out["usage"]["completion_tokens"]), seconds
