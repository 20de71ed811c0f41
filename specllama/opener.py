"""The one way to open a target and a draft: from a model reference (a GGUF
path, a pair name, ``ollama:``/``hf:``/``lmstudio:``, see
:mod:`specllama.model_refs`), an existing ``llama_cpp.Llama``, ``"prompt-lookup"``
or ``"auto"`` for the draft (the demo pair when nothing is named), joined into a
:class:`SpeculativeEngine`. Whatever fails, what was opened is closed again."""

from __future__ import annotations

import os
import warnings

from .backend import (
    DEFAULT_N_CTX,
    DEFAULT_N_GPU_LAYERS,
    LlamaModel,
    add_rpc_servers,
    build_info,
    default_threads,
    is_llama,
)
from .cost_cache import cost_key, load
from .demo import DEMO
from .drafters import PROMPT_LOOKUP
from .engine import SpeculativeEngine
from .errors import SpecLlamaError, SpecLlamaWarning
from .model_refs import check_pair, resolve
from .options import check_rpc_servers, check_switch, check_tensor_split

AUTO_DRAFT = "auto"  # -md auto: the local model that should pay best (specllama.pairing.auto_draft)


def resolve_paths(model: object, draft: object, pair: str | None = None, *,
                  default_pair: str = DEMO) -> tuple[object, object]:
    """What to load for the target and the draft.

    ``Llama`` objects stay as they are; a reference becomes its GGUF path
    (:func:`specllama.model_refs.resolve`: a path, a pair name standing for its
    file of that role, ``ollama:``, ``hf:``, ``lmstudio:``); a draft ``"auto"``
    becomes the local model that should pay best for the target
    (:func:`specllama.pairing.auto_draft`); ``pair`` (built in, curated, or saved by
    ``specllama pair --save``) fills in whichever of the two is not given; with
    nothing given, ``default_pair``.
    """
    if model is None and draft is None:
        pair = pair or default_pair
    if pair is not None:
        check_pair(pair)  # an unknown name is an error here, not a missing file
        model = pair if model is None else model
        draft = pair if draft is None else draft
    if model is None:
        raise SpecLlamaError(f"a draft model was given ({draft!r}) but no target: add -m/--model TARGET.gguf")
    target = _resolve(model, "target")
    if draft == AUTO_DRAFT:
        from .pairing import auto_draft

        return target, auto_draft(target.model_path if is_llama(target) else target).model.path  # type: ignore[union-attr]
    return target, _resolve(draft, "draft")


def _resolve(source: object, role: str) -> object:
    if source is None or is_llama(source) or (role == "draft" and source == PROMPT_LOOKUP):
        return source
    if isinstance(source, (str, os.PathLike)):
        return resolve(os.fspath(source), role)
    accepted = "a GGUF path, a model reference, a pair name or a llama_cpp.Llama" + (
        f" or {PROMPT_LOOKUP!r} or {AUTO_DRAFT!r}" if role == "draft" else "")
    raise SpecLlamaError(f"{role} must be {accepted}, got {source!r}")


def _open(source: object, *, n_ctx: int, n_gpu_layers: int, n_threads: int | None, verbose: bool, flash_attn: bool,
          rpc_servers: tuple[str, ...] = (), tensor_split: tuple[float, ...] | None = None,
          n_seq_max: int = 1) -> LlamaModel:
    if is_llama(source):
        if n_seq_max > 1:
            raise SpecLlamaError("parallel slots need models opened from files (an existing llama_cpp.Llama has one "
                                 "sequence in its cache): pass their paths")
        return LlamaModel.from_llama(source)  # type: ignore[arg-type]
    return LlamaModel(source, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads,  # type: ignore[arg-type]
                      verbose=verbose, rpc_servers=rpc_servers, tensor_split=tensor_split, flash_attn=flash_attn,
                      n_seq_max=n_seq_max)


def _check_rpc(target_src: object, draft_src: object, target_rpc: tuple[str, ...], draft_rpc: tuple[str, ...],
               n_gpu_layers: int, ngld: int, use_draft: bool) -> tuple[str, ...]:
    """RPC options that cannot apply are errors; those that would do nothing, warnings.
    Returns the draft's servers, if a draft model loads (else none: they are not contacted)."""
    if target_rpc and is_llama(target_src):
        raise SpecLlamaError("rpc_servers (--rpc) applies to a target opened from a file; this llama_cpp.Llama "
                             "is loaded already (create it after registering the servers, or pass its path)")
    loads_draft = use_draft and draft_src is not None and draft_src != PROMPT_LOOKUP
    if draft_rpc and loads_draft and is_llama(draft_src):
        raise SpecLlamaError("rpc_servers_draft (--rpc-draft) applies to a draft opened from a file; this "
                             "llama_cpp.Llama is loaded already")
    if target_rpc and n_gpu_layers == 0:
        warnings.warn(f"the target's layers all stay local: rpc_servers (--rpc {','.join(target_rpc)}) with "
                      "n_gpu_layers 0; offload them with -ngl 99 (n_gpu_layers=-1: all)", SpecLlamaWarning,
                      stacklevel=3)
    if draft_rpc and loads_draft and ngld == 0:
        warnings.warn(f"the draft's layers all stay local: rpc_servers_draft (--rpc-draft {','.join(draft_rpc)}) "
                      "with n_gpu_layers_draft 0; offload them with -ngld 99", SpecLlamaWarning, stacklevel=3)
    if draft_rpc and not loads_draft:
        warnings.warn(f"no draft model loads (no draft, prompt lookup or --draft-max 0), so rpc_servers_draft "
                      f"(--rpc-draft {','.join(draft_rpc)}) is not used", SpecLlamaWarning, stacklevel=3)
        return ()
    return draft_rpc


def open_engine(
    model: object = None,
    draft: object = None,
    *,
    pair: str | None = None,
    use_draft: bool = True,
    n_ctx: int = DEFAULT_N_CTX,
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
    n_gpu_layers_draft: int | None = None,
    n_threads: int | None = None,
    verbose: bool = False,
    default_pair: str = DEMO,
    warm_up: bool = True,
    rpc_servers: object = None,
    rpc_servers_draft: object = None,
    tensor_split: object = None,
    flash_attn: bool = False,
    n_seq_max: int = 1,
) -> SpeculativeEngine:
    """Load the target (and, if ``use_draft``, the draft) and check they match.

    Args:
        model: target reference (a GGUF path, a pair name, ``ollama:NAME:TAG``,
            ``hf:ORG/REPO/FILE.gguf``, ``lmstudio:PUBLISHER/REPO/FILE.gguf``) or
            ``llama_cpp.Llama`` (None with draft None: the demo pair).
        draft: draft reference, ``llama_cpp.Llama``, ``"prompt-lookup"`` or
            ``"auto"`` (the local model that should pay best; None: target-only
            decoding).
        pair: a pair name (built in, curated or saved) for whichever of
            model/draft is None.
        use_draft: False skips loading the draft (for ``draft_max=0``).
        n_ctx: context size of models opened from files (a draft opened from
            a file gets the target's actual context).
        n_gpu_layers: target layers to offload to the GPU.
        n_gpu_layers_draft: draft layers to offload (None: as the target).
        n_threads: CPU threads for both.
        verbose: let llama.cpp print its load log.
        default_pair: the built-in pair opened when nothing is named
            (``demo``, or ``demo-chat`` for chat surfaces).
        warm_up: run the first, slow passes now and start the draft-length
            policy from measured costs (saved ones where this pair was
            measured before, see :mod:`specllama.cost_cache`).
        rpc_servers: llama.cpp RPC servers for the target, ``"HOST:PORT,..."``
            or a list (llama.cpp's ``--rpc``): ``n_gpu_layers`` of its layers go
            to them (then to local GPUs). Each is checked (connect and
            handshake, with a timeout) before anything loads.
        rpc_servers_draft: RPC servers for the draft (None: the draft stays on
            local devices).
        tensor_split: the target's share of offloaded layers per device, in
            device order, RPC servers first (llama.cpp's ``--tensor-split``).
        flash_attn: flash attention in both models opened from files
            (llama.cpp's ``-fa on``; see :class:`~specllama.backend.LlamaModel`).
        n_seq_max: sequences both caches hold at once (parallel slots, :mod:`specllama.slots`).

    Raises:
        SpecLlamaError: a missing or unreadable file, an unknown pair, a
            vocabulary mismatch, an RPC server that does not answer (or a
            build without RPC); nothing stays open then.
    """
    target_rpc = check_rpc_servers(rpc_servers, "rpc_servers")
    draft_rpc = check_rpc_servers(rpc_servers_draft, "rpc_servers_draft")
    split = check_tensor_split(tensor_split)
    check_switch(flash_attn, "flash_attn")
    target_src, draft_src = resolve_paths(model, draft, pair, default_pair=default_pair)
    ngld = n_gpu_layers if n_gpu_layers_draft is None else n_gpu_layers_draft
    draft_rpc = _check_rpc(target_src, draft_src, target_rpc, draft_rpc, n_gpu_layers, ngld, use_draft)
    # every server answers, and its devices are registered, before the target loads
    add_rpc_servers(tuple(dict.fromkeys(target_rpc + draft_rpc)))
    target = _open(target_src, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads, verbose=verbose,
                   flash_attn=flash_attn, rpc_servers=target_rpc, tensor_split=split, n_seq_max=n_seq_max)
    draft_model = None
    try:
        if not use_draft or draft_src is None:
            engine = SpeculativeEngine(target, None)
        elif draft_src == PROMPT_LOOKUP:
            engine = SpeculativeEngine(target, PROMPT_LOOKUP)
        else:
            draft_model = _open(draft_src, n_ctx=target.n_ctx, n_gpu_layers=ngld, n_threads=n_threads,
                                verbose=verbose, flash_attn=flash_attn, rpc_servers=draft_rpc, n_seq_max=n_seq_max)
            engine = SpeculativeEngine(target, draft_model)
        if engine.drafter is not None:
            engine.cost_key = cost_key(target.path, draft_model.path if draft_model else PROMPT_LOOKUP,
                                       build=build_info(), n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=ngld,
                                       n_threads=n_threads or default_threads(), n_ctx=target.n_ctx,
                                       flash_attn=_flash_attn(target, draft_model),
                                       **_rpc_settings(target_rpc, draft_rpc, split))
        if warm_up:
            engine.warm_up()
        if engine.cost_key is not None:
            saved = load(engine.cost_key)
            if saved:
                engine.policy.seed(saved)  # what the warm-up did not time (other row counts, first steps, acceptance)
        return engine
    except BaseException:
        if draft_model is not None:
            draft_model.close()
        target.close()
        raise


def _flash_attn(target: LlamaModel, draft: LlamaModel | None) -> str:
    """Whether the models run flash attention, as they were made (an application's Llama has its own)."""
    return ",".join(str(m.flash_attn) for m in (target, draft) if m is not None)


def _rpc_settings(target_rpc: tuple[str, ...], draft_rpc: tuple[str, ...],
                  split: tuple[float, ...] | None) -> dict[str, object]:
    """What RPC changes in the saved costs' key (nothing without it: local keys stay as they were)."""
    settings: dict[str, object] = {}
    if target_rpc:
        settings["rpc"] = ",".join(target_rpc)
    if draft_rpc:
        settings["rpc_draft"] = ",".join(draft_rpc)
    if split is not None:
        settings["tensor_split"] = ",".join(f"{v:g}" for v in split)
    return settings
