"""A draft for a target, from the models on this machine, without loading any.

:func:`auto_draft` (``-md auto``) picks the local model that should pay best:
it passes the engine's vocabulary check and its expected speed-up from the
headers (weights read per token) is the highest. :func:`drafts_for` is what
``specllama pair`` measures (:mod:`specllama.pair_measure`).
"""

from __future__ import annotations

import logging
import os
from typing import Iterable

from .errors import SpecLlamaError
from .local_models import Candidate, LocalModel, Scan, candidates, read_model, scan

log = logging.getLogger("specllama")
MAX_REASONS = 6  # refused candidates an error names before "and N more"


def target_model(target: str, found: Scan) -> LocalModel:
    """The target's record: from the scan where it was found, else its own header."""
    real = os.path.realpath(target)
    for m in found.models:
        if os.path.realpath(m.path) == real:
            return m
    return read_model(target)


def look_around(target: str, dirs: Iterable[str] = ()) -> tuple[LocalModel, list[Candidate]]:
    """The target's record and every local model as its draft, best first: the stores, specllama's cache
    folder, ``dirs`` and the target's own folder."""
    found = scan([*dirs, os.path.dirname(os.path.abspath(target))])
    model = target_model(target, found)
    return model, candidates(model, found.models)


def _refusals(target: str, refused: list[Candidate]) -> str:
    if not refused:
        return (f"no other GGUF model was found for {target} (looked in Ollama's, LM Studio's and the Hugging Face "
                "cache's models, specllama's cache folder and the target's folder: see specllama models --local)")
    listed = "; ".join(f"{c.model.ref}: {c.reason}" for c in refused[:MAX_REASONS])
    more = f"; and {len(refused) - MAX_REASONS} more" if len(refused) > MAX_REASONS else ""
    return f"no local model should pay as a draft for {target}: {listed}{more}"


def auto_draft(target: str, *, dirs: Iterable[str] = ()) -> Candidate:
    """``-md auto``: the local model with the best expected speed-up as ``target``'s draft.

    Raises:
        SpecLlamaError: none passes the vocabulary check and pays by its size; the line names each
            model considered and why not.
    """
    _, found = look_around(target, dirs)
    good = [c for c in found if c.reason is None]
    if not good:
        raise SpecLlamaError(f"-md auto: {_refusals(target, found)}")
    best = good[0]
    log.warning("specllama: -md auto: draft %s (expected %.2fx from the sizes; specllama pair %s measures it)",
                best.model.ref, best.expected, target)
    return best


def drafts_for(target: str, dirs: Iterable[str] = ()) -> tuple[LocalModel, list[Candidate], list[Candidate]]:
    """``specllama pair``'s plan: the target's record, the models that pass the vocabulary check (best
    expected first), and those that do not.

    Raises:
        SpecLlamaError: no model passes the check (the line names each and why).
    """
    model, found = look_around(target, dirs)
    drafts = [c for c in found if c.compatible]
    refused = [c for c in found if not c.compatible]
    if not drafts:
        raise SpecLlamaError(f"pair: {_refusals(target, refused)}")
    return model, drafts, refused


def target_ref(given: str) -> str:
    """How a saved pair names its target: a reference as the user gave it, a path made absolute."""
    from .model_refs import is_store_ref

    return given if is_store_ref(given) or not os.path.exists(given) else os.path.abspath(given)
