"""Open the models a command or an application names (the demo pair by
default) and join them into a :class:`SpeculativeEngine`."""

from __future__ import annotations

from .backend import DEFAULT_N_CTX, DEFAULT_N_GPU_LAYERS, LlamaModel
from .demo import demo_pair
from .drafters import PROMPT_LOOKUP
from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .models import get_pair, resolve_model


def resolve_paths(model: str | None, draft: str | None, pair: str | None = None) -> tuple[str, str | None]:
    """The (target, draft) files to load.

    Paths stay paths; a curated pair name (models.txt) stands for its cached
    file; ``pair`` fills in whichever of the two is not given; with nothing
    given, the demo pair.
    """
    if pair is not None:
        get_pair(pair)  # an unknown name is an error here, not a missing file
        model = pair if model is None else model
        draft = pair if draft is None else draft
    if model is None and draft is None:
        return demo_pair()
    if model is None:
        raise SpecLlamaError(f"a draft model was given ({draft!r}) but no target: add -m/--model TARGET.gguf")
    return resolve_model(model, "target"), draft if draft == PROMPT_LOOKUP else resolve_model(draft, "draft")


def open_engine(
    model: str | None = None,
    draft: str | None = None,
    *,
    pair: str | None = None,
    use_draft: bool = True,
    n_ctx: int = DEFAULT_N_CTX,
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
    n_gpu_layers_draft: int | None = None,
    n_threads: int | None = None,
) -> SpeculativeEngine:
    """Load the target (and, if ``use_draft``, the draft) and check they match.

    Args:
        model: target GGUF path or pair name (None with draft None: the demo pair).
        draft: draft GGUF path or pair name (None: target-only decoding).
        pair: a curated pair name for whichever of model/draft is None.
        use_draft: False skips loading the draft (for ``draft_max=0``).
        n_ctx: context size of both models.
        n_gpu_layers: target layers to offload to the GPU.
        n_gpu_layers_draft: draft layers to offload (None: as the target).
        n_threads: CPU threads for both.
    """
    target_path, draft_path = resolve_paths(model, draft, pair)
    target = LlamaModel(target_path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
    draft_model = None
    if use_draft and draft_path == PROMPT_LOOKUP:
        return SpeculativeEngine(target, PROMPT_LOOKUP)
    if use_draft and draft_path is not None:
        ngld = n_gpu_layers if n_gpu_layers_draft is None else n_gpu_layers_draft
        try:
            draft_model = LlamaModel(draft_path, n_ctx=n_ctx, n_gpu_layers=ngld, n_threads=n_threads)
            return SpeculativeEngine(target, draft_model)
        except BaseException:
            target.close()
            if draft_model is not None:
                draft_model.close()
            raise
    return SpeculativeEngine(target, None)
