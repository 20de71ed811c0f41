"""Open the models a command or an application names (the demo pair by
default) and join them into a :class:`SpeculativeEngine`."""

from __future__ import annotations

from .backend import DEFAULT_N_CTX, DEFAULT_N_GPU_LAYERS, LlamaModel
from .demo import demo_pair
from .engine import SpeculativeEngine
from .errors import SpecLlamaError


def resolve_paths(model: str | None, draft: str | None) -> tuple[str, str | None]:
    """The (target, draft) files to load: the demo pair when neither is given."""
    if model is None and draft is None:
        return demo_pair()
    if model is None:
        raise SpecLlamaError(f"a draft model was given ({draft!r}) but no target: add -m/--model TARGET.gguf")
    return model, draft


def open_engine(
    model: str | None = None,
    draft: str | None = None,
    *,
    use_draft: bool = True,
    n_ctx: int = DEFAULT_N_CTX,
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
    n_gpu_layers_draft: int | None = None,
    n_threads: int | None = None,
) -> SpeculativeEngine:
    """Load the target (and, if ``use_draft``, the draft) and check they match.

    Args:
        model: target GGUF path (None with draft None: the demo pair).
        draft: draft GGUF path (None: target-only decoding).
        use_draft: False skips loading the draft (for ``draft_max=0``).
        n_ctx: context size of both models.
        n_gpu_layers: target layers to offload to the GPU.
        n_gpu_layers_draft: draft layers to offload (None: as the target).
        n_threads: CPU threads for both.
    """
    target_path, draft_path = resolve_paths(model, draft)
    target = LlamaModel(target_path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
    draft_model = None
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
