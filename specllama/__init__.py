"""specllama: exact speculative decoding for llama.cpp GGUF models."""

from .demo import demo_pair
from .engine import SpeculativeEngine, Step
from .errors import SpecLlamaError
from .generate import Chunk, GenerationResult, generate, stream_generate
from .sampling import SamplingParams, sample_from, to_probs, verify
from .stats import GenerationStats

__all__ = [
    "Chunk",
    "GenerationResult",
    "GenerationStats",
    "SamplingParams",
    "SpecLlamaError",
    "SpeculativeEngine",
    "SpeculativeLlama",
    "Step",
    "demo_pair",
    "generate",
    "open_engine",
    "sample_from",
    "stream_generate",
    "to_probs",
    "verify",
]


def __getattr__(name: str):
    # Loading models needs llama_cpp; the math alone does not.
    if name == "open_engine":
        from .opener import open_engine

        return open_engine
    if name == "SpeculativeLlama":
        from .api import SpeculativeLlama

        return SpeculativeLlama
    raise AttributeError(f"module 'specllama' has no attribute {name!r}")
