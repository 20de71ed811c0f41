"""specllama: exact speculative decoding for llama.cpp GGUF models.

The names below load on first use, so importing a submodule (the server's
request schemas, the sampler) does not load llama.cpp.
"""

from __future__ import annotations

import importlib
import logging
import warnings

# public name -> the module that defines it
_PUBLIC = {
    "Chunk": "generation",
    "GenerationOptions": "options",
    "GenerationResult": "generation",
    "GenerationStats": "stats",
    "SamplingParams": "sampling",
    "SpecLlamaError": "errors",
    "SpeculativeEngine": "engine",
    "SpeculativeLlama": "api",
    "Step": "engine",
    "accept_tokens": "sampling",
    "demo_pair": "demo",
    "generate": "generation",
    "open_engine": "opener",
    "sample_from": "sampling",
    "stream_generate": "generation",
    "to_probs": "sampling",
}
# a library's notices (the policy's "drafting cannot pay") reach a program only through its own logging set-up;
# the command line prints them (cli_group)
logging.getLogger("specllama").addHandler(logging.NullHandler())

# former names, still answered with a DeprecationWarning
_DEPRECATED = {"verify": ("sampling", "accept_tokens")}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    if name in _DEPRECATED:
        module, new = _DEPRECATED[name]
        warnings.warn(f"specllama.{name} is deprecated: use specllama.{new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(f".{module}", __name__), new)
    raise AttributeError(f"module 'specllama' has no attribute {name!r}")
