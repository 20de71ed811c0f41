"""The speculative decoding loop, as a generator of steps.

Each step drafts k tokens (with a draft model, or by prompt lookup), has the target score
[last, x_0 .. x_{k-1}] in one batch (k+1 rows of logits), keeps what the
exact acceptance rule keeps, rewinds both KV caches to the accepted prefix
and yields what it emitted. ``draft_max=0`` runs the very same code with
k = 0: plain target-only decoding, the baseline for every comparison.

The models are duck-typed (see :class:`Model`): anything that keeps a token
list of its cache, evaluates a batch and rewinds will do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import numpy as np

from .adaptive import DEFAULT_DRAFT_MAX, DraftLengthPolicy
from .drafters import PROMPT_LOOKUP, Drafter, ModelDrafter, PromptLookupDrafter
from .errors import SpecLlamaError
from .prefix import sync_prefix
from .processors import Processor, processed
from .sampling import (DEFAULT_RULE, SamplingParams, SparseProbs, UniformSource, accept_block_sparse,
                       accept_tokens_sparse, sparse_probs)
from .vocab import check_compatible


class Model(Protocol):
    """What the engine needs of a model (``backend.LlamaModel`` is one)."""

    tokens: list[int]
    n_ctx: int
    n_vocab: int
    n_batch: int

    def eval(self, tokens: Sequence[int], *, n_logits: int = 1, copy: bool = True) -> np.ndarray: ...

    def rewind(self, n_keep: int) -> None: ...

    def is_eog(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Step:
    """What one iteration of the loop emitted.

    Attributes:
        tokens: the new tokens, in order (an end-of-generation token excluded).
        n_drafted: draft tokens proposed this iteration (k).
        n_accepted: how many of them the target kept.
        draft_seconds: time spent drafting.
        verify_seconds: time spent in the target pass and the acceptance test.
        finish_reason: None while going on; "stop" at an end-of-generation
            token; "length" at ``max_tokens`` or a full context.
        target_logits: the target's logits rows of this pass, row j the one
            ``tokens[j]`` was drawn from (before the processor); a view that
            is valid only until the loop is resumed (None on the closing
            "length" step).
        eog_token: the end-of-generation token sampled (finish "stop"), which
            is not among ``tokens``.

    ``tokens[j]`` for j < n_accepted is a draft token the target accepted;
    the one after them (if emitted) was sampled by the target itself.
    """

    tokens: list[int]
    n_drafted: int
    n_accepted: int
    draft_seconds: float
    verify_seconds: float
    finish_reason: str | None = None
    target_logits: np.ndarray | None = None
    eog_token: int | None = None


class SpeculativeEngine:
    """A target model, a drafter, and the loop that joins them.

    Args:
        target: the model whose distribution the output follows exactly.
        draft: a draft model, ``"prompt-lookup"`` (n-gram drafts from the text
            itself), a :class:`~specllama.drafters.Drafter`, or None for
            target-only decoding.
        check: verify first that a draft model's vocabulary matches the target's.
    """

    def __init__(self, target: Model, draft=None, *, check: bool = True) -> None:
        self.target = target
        #: the draft model, when drafts come from one
        self.draft: Model | None = None
        self.drafter: Drafter | None = None
        if isinstance(draft, str):
            if draft != PROMPT_LOOKUP:
                raise SpecLlamaError(f"draft must be a model or {PROMPT_LOOKUP!r}, got {draft!r}")
            self.drafter = PromptLookupDrafter()
        elif hasattr(draft, "propose"):
            self.drafter = draft
        elif draft is not None:
            if check:
                check_compatible(target.vocab_info(), draft.vocab_info())  # type: ignore[attr-defined]
            self.draft = draft
            self.drafter = ModelDrafter(draft)
        #: learns the best draft length from past passes (adaptive mode)
        self.policy = DraftLengthPolicy()
        #: where the policy's measurements are remembered between processes (None: nowhere)
        self.cost_key: str | None = None

    def warm_up(self, cap: int = DEFAULT_DRAFT_MAX) -> None:
        """Run both models' first, slow passes now, not in the user's first
        generation, and give the policy the timings of a 1-row and a
        (cap+1)-row target pass and of a draft step (where it has none
        better, e.g. saved by an earlier process)."""
        verify = self.target.warm_up((1, cap + 1)) if hasattr(self.target, "warm_up") else {}
        draft = self.draft.warm_up((1,)) if self.draft is not None and hasattr(self.draft, "warm_up") else {}
        self.policy.seed({"draft_seconds": draft.get(1), "verify_seconds": verify})

    def close(self) -> None:
        """Remember the policy's measurements (see :mod:`specllama.cost_cache`)
        and free both models (for models that can be closed)."""
        if self.cost_key is not None and self.policy.drafting_passes:
            from .cost_cache import save

            save(self.cost_key, self.policy.snapshot())
            self.cost_key = None
        for m in (self.draft, self.target):
            if m is not None and hasattr(m, "close"):
                m.close()

    def __enter__(self) -> "SpeculativeEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prefill(self, prompt_tokens: Sequence[int], *, draft: bool = True) -> int:
        """Evaluate the prompt, all but its last token, in both caches,
        reusing what they already hold.

        Returns:
            how many prompt tokens the target had to evaluate.
        """
        n_evaluated = sync_prefix(self.target, prompt_tokens[:-1])
        if draft and self.drafter is not None:
            self.drafter.prefill(prompt_tokens[:-1])
        return n_evaluated

    def steps(
        self,
        prompt_tokens: Sequence[int],
        *,
        params: SamplingParams,
        draft_max: int,
        max_tokens: int | None,
        rng: np.random.Generator | UniformSource,
        adaptive: bool = True,
        processor: Processor | None = None,
        draft_min: int = 0,
        rule: str = DEFAULT_RULE,
    ) -> Iterator[Step]:
        """Decode after ``prompt_tokens`` until a finish reason.

        The arguments are checked by the generation layer
        (:mod:`specllama.options`); this loop trusts them.

        Args:
            prompt_tokens: the prompt, at least one token.
            params: sampling transforms, applied alike to target and draft rows.
            draft_max: tokens to draft per iteration (0: no draft); with
                ``adaptive``, the most the policy may choose.
            max_tokens: the most tokens to emit (None: until the context is full).
            rng: the one source of randomness for drafting and acceptance.
            adaptive: choose each pass's draft length from measured costs and
                acceptance (:mod:`specllama.adaptive`); False drafts exactly
                ``draft_max`` whenever there is room.
            processor: ``(input_ids, scores) -> scores``, applied to every
                target and draft row with the tokens before that row (drafts
                included), so the output follows the processed target exactly.
                It must be a pure function (see :mod:`specllama.processors`).
            draft_min: the least the adaptive policy may draft (room allowing).
            rule: "token" (token-wise acceptance) or "block" (block verification).

        Yields:
            one :class:`Step` per target pass; the last has a finish_reason.
        """
        target, drafter = self.target, self.drafter
        if drafter is None:
            draft_max = 0
        n_vocab = target.n_vocab
        # With one-hot drafts (greedy sampling, prompt lookup) block verification
        # has exactly the token-wise rule's law, so the cheaper lazy walk serves.
        one_hot_drafts = params.greedy or isinstance(drafter, PromptLookupDrafter)
        seq = list(prompt_tokens)
        self.prefill(seq, draft=draft_max > 0)
        n_emitted = 0
        while True:
            # The target must hold seq and k drafts: len(seq) + k <= n_ctx.
            room = target.n_ctx - len(seq)
            if room < 0:
                yield Step([], 0, 0, 0.0, 0.0, "length")
                return
            k = min(draft_max, room)
            if drafter is not None:
                # The draft evaluates seq and all but its last draft; when only
                # the draft is out of room, drafting stops and the target goes on.
                k = min(k, max(drafter.n_ctx - len(seq) + 1, 0))
            # One target pass is one llama.cpp batch: the pending tokens and the drafts.
            k = min(k, target.n_batch - (len(seq) - len(target.tokens)))
            if max_tokens is not None:
                # never draft more than can still be emitted (k drafts emit up to k + 1)
                k = min(k, max_tokens - n_emitted - 1)
            k = max(k, 0)
            if adaptive:
                # Fixed before this pass draws anything: past passes only.
                k = self.policy.choose(k, minimum=draft_min)

            t0 = time.perf_counter()
            draft_tokens: list[int] = []
            q_draft: list[SparseProbs] = []
            if k > 0:
                draft_tokens, q_draft = drafter.propose(seq, k, params, rng, processor, n_vocab)
            t1 = time.perf_counter()

            # One target pass scores every draft position and the bonus row;
            # with the token-wise rule a row becomes a distribution only if
            # the acceptance walk reaches it.
            n_rows = len(draft_tokens) + 1
            logits = target.eval(seq[len(target.tokens):] + draft_tokens, n_logits=n_rows, copy=False)
            p_rows: dict[int, SparseProbs] = {}

            def p_row(i: int) -> SparseProbs:
                if i not in p_rows:
                    row = processed(logits[i], seq + draft_tokens[:i] if processor else (), processor)
                    p_rows[i] = sparse_probs(row, params)
                return p_rows[i]

            if rule == "block" and not one_hot_drafts:
                # block verification needs every row: it weighs the whole block at once
                n_accepted, next_token = accept_block_sparse([p_row(i) for i in range(n_rows)], q_draft,
                                                             draft_tokens, rng)
            else:
                n_accepted, next_token = accept_tokens_sparse(p_row, q_draft, draft_tokens, rng)
            new_tokens = draft_tokens[:n_accepted] + [next_token]

            # Both caches keep seq + the accepted drafts; the next token is
            # evaluated in the next pass.
            target.rewind(len(seq) + n_accepted)
            if drafter is not None:
                drafter.keep(len(seq) + n_accepted)
            t2 = time.perf_counter()
            catch_up = getattr(drafter, "catch_up_seconds", 0.0) if k > 0 else 0.0
            self.policy.observe(len(draft_tokens), n_accepted, t1 - t0 - catch_up, t2 - t1)

            emitted: list[int] = []
            finish = eog = None
            for tok in new_tokens:
                if target.is_eog(tok):
                    finish, eog = "stop", tok
                    break
                emitted.append(tok)
                if max_tokens is not None and n_emitted + len(emitted) >= max_tokens:
                    finish = "length"
                    break
            seq.extend(new_tokens)
            n_emitted += len(emitted)
            yield Step(emitted, len(draft_tokens), n_accepted, t1 - t0, t2 - t1, finish, logits, eog)
            if finish is not None:
                return
