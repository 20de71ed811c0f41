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

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np

from .constraint import Constraint, masked
from .drafters import PROMPT_LOOKUP, Drafter, ModelDrafter, PromptLookupDrafter
from .errors import ContextFull, SpecLlamaError
from .lookup_mix import LookupMix
from .policy import (
    DEFAULT_DRAFT_MAX,
    WARM_UP_TIMINGS,
    AdaptivePolicy,
    Batch,
    DraftPolicy,
    FixedPolicy,
    PassRecord,
    Plan,
    WarmUp,
    warm_up_rows,
)
from .prefix import common_prefix_len, keep_reusable, sync_prefix
from .processors import Processor, processed
from .sampling import (
    DEFAULT_RULE,
    SamplingParams,
    SparseProbs,
    UniformSource,
    accept_block_sparse,
    accept_tokens_sparse,
    one_hot,
    sparse_probs,
)
from .vocab import check_compatible

log = logging.getLogger("specllama")
PREFILL_PIECE = 256  # tokens per piece of a prompt loaded without generating (a warm-up can stop between them)
WARM_UP_CONTEXT = 32  # tokens in the cache while the warm-up times passes (a short prompt's worth)
SWITCH = "switch"  # the warm-up's key for its 1-row passes right after a pass of another shape
PREFILL = "prefill"  # the warm-up's key for a model's prefill of WARM_UP_CONTEXT tokens, per token (a draft's catch-up)
# The warm-up's acceptance check: the draft continues this greedily, and the target checks the
# WARM_UP_DRAFTED tokens after the first WARM_UP_SKIPPED in one batch (the policy's prior
# acceptance, :func:`_draft_agreement`). The first words after a prompt are where a pair agrees
# least (the answer's opening), and a generation's acceptance is mostly that of its body.
WARM_UP_PROMPT = "The history of the printing press"
WARM_UP_SKIPPED = 4
WARM_UP_DRAFTED = 16


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
        masks: under a constraint, per row of ``target_logits`` that a token
            was drawn from, the grammar's mask of allowed tokens (None: none).
        n_forced: how many of the drafts were the grammar's forced tokens
            (proposed without the draft model; 0 or ``n_drafted``).
        n_looked_up: how many of the drafts came from prompt lookup mixed
            with the draft model's (:mod:`specllama.lookup_mix`; 0 or ``n_drafted``).

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
    masks: list | None = None
    n_forced: int = 0
    n_looked_up: int = 0


class SpeculativeEngine:
    """A target model, a drafter, and the loop that joins them.

    Args:
        target: the model whose distribution the output follows exactly.
        draft: a draft model, ``"prompt-lookup"`` (n-gram drafts from the text
            itself), a :class:`~specllama.drafters.Drafter`, or None for
            target-only decoding.
        check: verify first that a draft model's vocabulary matches the target's.
        clock: seconds, for every timing the policy learns from (a test's fake clock).
    """

    def __init__(self, target: Model, draft=None, *, check: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.target = target
        self.clock = clock
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
            self.drafter = ModelDrafter(draft, clock=clock)
        #: chooses each pass's draft length from past passes (adaptive mode; :mod:`specllama.policy`)
        self.policy: DraftPolicy = AdaptivePolicy()
        #: where the policy's measurements are remembered between processes (None: nowhere)
        self.cost_key: str | None = None
        self._noticed = False  # the "drafting cannot pay" notice was given (once per loaded pair)
        self._draft_synced = True  # the draft model holds a prefix of the sequence being decoded
        self._draft_held = 0  # where it does not (not fed the prompt), how much of the prompt it holds
        #: llama-server's --cache-reuse: cached runs of at least this many tokens that a new prompt
        #: holds further on are shifted into place in both caches instead of evaluated (0: off)
        self.cache_reuse = 0
        #: with a draft model: prompt-lookup drafts taken instead of its drafts in the passes where
        #: they promise more (:class:`~specllama.lookup_mix.LookupMix`; None: the draft model's only)
        self.lookup_mix: LookupMix | None = None
        #: in a parallel slot (:meth:`for_sequence`): what the slots share (the sequences running now, their policy)
        self.batch: Batch | None = None
        self.seq_id = 0

    def for_sequence(self, seq_id: int, batch: Batch) -> "SpeculativeEngine":
        """An engine for parallel slot ``seq_id``: both models' views of that
        sequence, a drafter of its own, and a policy that shares this one's
        costs and acceptance but chooses for its own sequence while it runs
        alone; with others running, ``batch``'s policy chooses for them all."""
        if self.drafter is not None and not isinstance(self.drafter, (ModelDrafter, PromptLookupDrafter)):
            raise SpecLlamaError("parallel slots draft with a draft model or prompt lookup, not a custom drafter")
        engine = SpeculativeEngine(self.target.sequence(seq_id), None, check=False, clock=self.clock)
        if self.draft is not None:
            engine.draft = self.draft.sequence(seq_id)
            engine.drafter = ModelDrafter(engine.draft, clock=self.clock)
        elif self.drafter is not None:
            engine.drafter = PromptLookupDrafter()
        engine.policy = self.policy.fork(seq_id) if isinstance(self.policy, AdaptivePolicy) else self.policy
        engine.cache_reuse, engine._noticed = self.cache_reuse, True
        engine.lookup_mix = LookupMix() if self.lookup_mix is not None else None
        engine.batch, engine.seq_id = batch, seq_id
        return engine

    def alone(self) -> bool:
        """Whether no other parallel slot is running (always, outside slots)."""
        return self.batch is None or not self.batch.running - {self.seq_id}

    def warm_up(self, cap: int = DEFAULT_DRAFT_MAX) -> None:
        """Run both models' first, slow passes now, not in the user's first
        generation, and give the policy ``WARM_UP_TIMINGS`` timings each of the
        target passes of :func:`~specllama.policy.warm_up_rows` (1, 2 and cap + 1
        rows) and of a draft step, with ``WARM_UP_CONTEXT`` tokens in the cache;
        then, where the costs say drafting may pay, the share of a short greedy
        draft that the target agrees with (:func:`_draft_agreement`)."""
        timed = warm_up_rows(cap)
        verify = self.target.warm_up(timed) if hasattr(self.target, "warm_up") else {}  # cold passes
        if self.draft is not None and hasattr(self.draft, "warm_up"):
            self.draft.warm_up((1, 2))
        rows = [n for n in timed if n in verify]
        drafts = self.draft is not None and bool(self.drafter)
        # in a generation's order: a draft step, then verify passes, most rows first (one row after a target pass).
        # On a GPU each row count is timed as the third of its shape in a row, as target-only decoding and a fixed
        # draft length pay it (policy.SETTLED: llama.cpp replays a CUDA graph from the third pass of a shape in a
        # row), and one row right after the 2-row pass is timed apart. On a CPU the two cost the same, and the passes
        # between made the demo pair's warm-up 1.7x as long there.
        settle = 1 in rows and getattr(self.target, "offloaded", False)
        target_rows = rows[::-1] if not settle else [
            entry for n in rows[::-1] if n != 1 for entry in ((None, n), (None, n), n)] + [(SWITCH, 1), (None, 1), 1]
        steps, timings = _time_passes([(self.draft if drafts else None, [1, 2]), (self.target, target_rows)],
                                      self.clock)
        switch, _ = timings.pop(SWITCH, []), timings.pop(PREFILL, None)
        self.policy.observe_warm_up(WarmUp(steps.get(1, []), timings, switch, steps.get(2, []), steps.get(PREFILL, [])))
        if steps and self.policy.verdict(cap) is None:
            agreement = _draft_agreement(self.target, self.draft)
            if agreement is not None:
                self.policy.observe_agreement(*agreement)

    def draft_cap(self, draft_max: int) -> int:
        """The most drafts a pass can take: ``draft_max``, but no more than one target batch holds beside the
        pass's first row (a larger draft length is this one)."""
        return max(min(draft_max, self.target.n_batch - 1), 0)

    def _notice(self, cap: int) -> None:
        """Once per loaded pair: the policy decodes target-only because even
        perfect acceptance cannot pay, with the measured costs."""
        if self._noticed or self.drafter is None:
            return
        verdict = self.policy.verdict(cap)
        if verdict is not None:
            self._noticed = True
            log.warning("specllama: %s; decoding target-only (costs are measured again now and then)", verdict)

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
        reusing what they already hold (:meth:`prefill_pieces` in one piece).

        Returns:
            how many prompt tokens the target had to evaluate.
        """
        n_evaluated = 0
        for n_evaluated in self.prefill_pieces(prompt_tokens, draft=draft, piece=max(len(prompt_tokens), 1)):
            pass
        return n_evaluated

    def prefill_pieces(self, prompt_tokens: Sequence[int], *, draft: bool = True,
                       piece: int = PREFILL_PIECE) -> Iterator[int]:
        """The prompt, all but its last token, evaluated in pieces of at most
        ``piece`` new target tokens, yielding after each how many the target
        evaluated so far (a caller can stop between pieces: what was evaluated
        stays cached); ``cache_reuse`` applies. The draft catches up after the
        target's last piece."""
        target_tokens = list(prompt_tokens[:-1])
        keep = keep_reusable(self.target, target_tokens, self.cache_reuse)
        n_evaluated = 0
        for end in range(keep + piece, len(target_tokens) + piece, piece):
            n_evaluated += sync_prefix(self.target, target_tokens[:min(end, len(target_tokens))])
            yield n_evaluated
        if keep >= len(target_tokens):
            yield n_evaluated  # all of it was cached
        if draft and self.drafter is not None:
            self.drafter.prefill(target_tokens, self.cache_reuse)

    def _draft_model(self):
        """The model that drafts, where one does (the one a catch-up evaluates on)."""
        return self.drafter.model if isinstance(self.drafter, ModelDrafter) else None

    def draft_lacks(self, seq: Sequence[int]) -> int:
        """The tokens of ``seq`` (but its last) that drafting now would first catch up in the draft model: none
        without one, nor the one a first draft step evaluates (the last draft of a pass that kept them all). Where
        the draft was not fed the prompt, all it does not hold of the prompt (an upper bound: ``cache_reuse`` may
        shift some into place instead)."""
        model = self._draft_model()
        if model is None:
            return 0
        if self._draft_synced:
            lacking = len(seq) - 1 - len(model.tokens)
            return lacking if lacking > 1 else 0
        return max(len(seq) - 1 - min(self._draft_held, len(model.tokens)), 0)

    def feeds_draft(self, draft_max: int, adaptive: bool) -> bool:
        """Whether a generation feeds the draft model its prompt: it drafts,
        (adaptive) the policy is drafting, and no other parallel slot runs.
        Otherwise the draft is not fed: it catches up, lazily and timed, when
        drafting resumes."""
        return self.drafter is not None and draft_max > 0 and self.alone() and (
            not adaptive or self.policy.drafting(self.draft_cap(draft_max)))

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
        constraint: Constraint | None = None,
        forced_drafts: bool = True,
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
            adaptive: choose each pass's draft length with the engine's policy
                (:mod:`specllama.policy`); False drafts exactly ``draft_max``
                whenever there is room (:class:`~specllama.policy.FixedPolicy`).
            processor: ``(input_ids, scores) -> scores``, applied to every
                target and draft row with the tokens before that row (drafts
                included), so the output follows the processed target exactly.
                It must be a pure function (see :mod:`specllama.processors`).
            draft_min: the least the adaptive policy may draft (room allowing).
            rule: "token" (token-wise acceptance) or "block" (block verification).
            constraint: a grammar (:mod:`specllama.constraint`): every target
                and draft row is masked to the tokens it allows after the
                tokens before that row; it advances by emitted tokens only.
            forced_drafts: under a constraint, draft the tokens the grammar
                forces (one-hot, without the draft model) when there are any.

        Yields:
            one :class:`Step` per target pass; the last has a finish_reason.
        """
        draft_max = self.draft_cap(draft_max) if self.drafter is not None else 0
        draft_min = min(draft_min, draft_max)
        policy = self.policy if adaptive else FixedPolicy(draft_max, self.policy)
        seq = list(prompt_tokens)
        if self.batch is not None:
            self.batch.running.add(self.seq_id)
        feed = self.feeds_draft(draft_max, adaptive)
        try:
            self.prefill(seq, draft=feed)
        except ContextFull:  # parallel slots share the cache: a prompt that does not fit now ends at once
            yield Step([], 0, 0, 0.0, 0.0, "length")
            return
        self._draft_synced = feed
        # what the unfed draft holds of the prompt (unchanged until it catches up, but for a trim)
        model = self._draft_model()
        self._draft_held = common_prefix_len(model.tokens, seq) if model is not None and not feed else 0
        policy.new_sequence()
        if adaptive and draft_max > 0 and not feed:  # (drafting from the start: no notice to give)
            self._notice(draft_max)
        gen = _Generation(self, policy, seq, params=params, draft_max=draft_max, draft_min=draft_min,
                          max_tokens=max_tokens, rng=rng, processor=processor, rule=rule, constraint=constraint,
                          forced_drafts=forced_drafts, lookup_mix=self.lookup_mix)
        try:
            while True:
                step = gen.step()
                yield step
                if step.finish_reason is not None:
                    return
        finally:
            if self.batch is not None:
                self.batch.running.discard(self.seq_id)
                self.batch.behind.pop(self.seq_id, None)


@dataclass
class _Pass:
    """What a pass was planned to do: its draft length (room and the policy allowing), and where its drafts come
    from (the grammar's forced tokens, prompt lookup, or the draft model)."""

    k: int
    room_k: int  # the draft length the room allowed (a lookup mix's bound)
    forced: list[int]
    looked_up: list[int]
    pad: list[int]  # a probe: tokens padding a target-only pass, whose rows past the first go unused
    rows: "_ConstrainedRows | None"
    row_fn: Processor | None


class _Generation:
    """One generation's loop state, a pass at a time: plan it (which source drafts how many), run it (drafts,
    one target pass, acceptance), report it (to the policy, the grammar and the caller)."""

    def __init__(self, engine: SpeculativeEngine, policy: DraftPolicy, seq: list[int], *, params: SamplingParams,
                 draft_max: int, draft_min: int, max_tokens: int | None, rng, processor: Processor | None, rule: str,
                 constraint: Constraint | None, forced_drafts: bool, lookup_mix: LookupMix | None) -> None:
        self.engine, self.policy, self.seq = engine, policy, seq
        self.params, self.draft_max, self.draft_min, self.max_tokens = params, draft_max, draft_min, max_tokens
        self.rng, self.processor, self.rule = rng, processor, rule
        self.constraint, self.forced_drafts, self.lookup_mix = constraint, forced_drafts, lookup_mix
        # With one-hot drafts (greedy sampling, prompt lookup) block verification
        # has exactly the token-wise rule's law, so the cheaper lazy walk serves.
        self.one_hot_drafts = params.greedy or isinstance(engine.drafter, PromptLookupDrafter)
        self.n_emitted = 0

    def step(self) -> Step:
        plan = self._plan()
        if isinstance(plan, Step):
            return plan
        return self._run(plan)

    def _room(self) -> int:
        """The most drafts this pass has room for: the target's context (and the draft's), one llama.cpp batch,
        and what may still be emitted (k drafts emit up to k + 1)."""
        engine, target = self.engine, self.engine.target
        k = min(self.draft_max, target.n_ctx - len(self.seq))
        if engine.drafter is not None:
            # The draft evaluates seq and all but its last draft; when only the draft is out of room, drafting
            # stops and the target goes on.
            k = min(k, max(engine.drafter.n_ctx - len(self.seq) + 1, 0))
        k = min(k, target.n_batch - (len(self.seq) - len(target.tokens)))  # one target pass is one batch
        if self.max_tokens is not None:
            k = min(k, self.max_tokens - self.n_emitted - 1)
        return max(k, 0)

    def _left(self) -> int:
        """The most tokens this generation may still emit: its ``max_tokens``, the target's context."""
        left = self.engine.target.n_ctx - len(self.seq) + 1
        return left if self.max_tokens is None else min(left, self.max_tokens - self.n_emitted)

    def _plan(self) -> "_Pass | Step":
        """The pass's plan, or a closing Step (a full context; a complete grammar: no other target pass)."""
        engine, seq = self.engine, self.seq
        if engine.target.n_ctx - len(seq) < 0:
            return Step([], 0, 0, 0.0, 0.0, "length")
        k = room_k = self._room()
        rows, row_fn, forced = None, self.processor, []
        if self.constraint is not None:
            if self.constraint.done:
                return Step([], 0, 0, 0.0, 0.0, "stop")
            row_fn = rows = _ConstrainedRows(self.processor, self.constraint, len(seq))
            if self.forced_drafts and k > 0:
                forced = self.constraint.forced()[:k]  # a function of the emitted tokens only, like every choice of k
        pad: list[int] = []
        looked_up: list[int] = []
        if not forced:
            # fixed before this pass draws: past passes only. With other parallel slots running, the draft length
            # of every slot of this step is the batch's (:mod:`specllama.policy.batch`)
            alone, lacks = engine.alone(), engine.draft_lacks(seq)
            if alone or not isinstance(self.policy, AdaptivePolicy):
                plan = self.policy.choose(k, minimum=self.draft_min, behind=lacks, remaining=self._left())
            else:
                batch = engine.batch
                batch.behind[engine.seq_id] = lacks
                behind = sum(batch.behind.get(i, 0) for i in batch.running)
                plan = Plan(max(batch.policy.choose(k, len(batch.running), batch.step, behind), min(self.draft_min, k)))
            k = plan.k
            if self.lookup_mix is not None and engine.drafter is not None:
                # from the committed sequence and past passes only, like k
                looked_up = self.lookup_mix.plan(seq, room_k if engine.alone() else 0, self.policy, k,
                                                 engine.target.is_eog)
            if k == 0 and not looked_up:
                pad = [seq[-1]] * min(plan.pad, room_k)
        return _Pass(k, room_k, forced, looked_up, pad, rows, row_fn)

    def _propose(self, plan: _Pass) -> tuple[list[int], list[SparseProbs], float, float, float]:
        """The pass's drafts and the laws they were drawn from; the draft's catch-up, a probe's draft step, and
        the first draft step (seconds; 0 where none)."""
        engine, seq, clock = self.engine, self.seq, self.engine.clock
        drafter = engine.drafter
        if plan.forced or plan.looked_up:
            drafts = plan.forced or plan.looked_up
            return drafts, [one_hot(t) for t in drafts], 0.0, 0.0, 0.0
        if plan.k > 0:
            catch_up = 0.0
            model = drafter.model if isinstance(drafter, ModelDrafter) else None
            if model is not None and (not engine._draft_synced or engine.draft_lacks(seq)):
                # the draft skipped the prompt or target-only passes: it catches up now, a cost of this pass
                n_behind = len(seq) - 1 - common_prefix_len(model.tokens, seq)
                t0 = clock()
                drafter.prefill(seq[:-1], engine.cache_reuse)
                catch_up = clock() - t0
                engine._draft_synced = True
                if engine.alone():  # in a pass shared with other slots, its time is theirs too
                    self.policy.observe_catch_up(catch_up, max(n_behind, 0))
            drafts, q = drafter.propose(seq, plan.k, self.params, self.rng, plan.row_fn, engine.target.n_vocab)
            first = drafter.first_step_seconds if isinstance(drafter, ModelDrafter) else None
            return drafts, q, catch_up, 0.0, first or 0.0
        if plan.pad and engine.draft is not None and len(engine.draft.tokens) < engine.draft.n_ctx:
            return [], [], 0.0, _time_draft_step(engine.draft, seq[-1], clock), 0.0
        return [], [], 0.0, 0.0, 0.0

    def _run(self, plan: _Pass) -> Step:
        """Draft, one target pass over the drafts (and a probe's padding), the acceptance rule; then the report."""
        engine, seq, target, clock = self.engine, self.seq, self.engine.target, self.engine.clock
        t0 = clock()
        drafts, q_draft, catch_up, probe_step, first = self._propose(plan)
        if self.constraint is not None and drafts:
            # A draft the grammar forbids (a one-hot draft can be one) stays as the last
            # draft: its masked target row gives it probability 0, so it is rejected there.
            keep = self.constraint.legal_prefix(drafts) + 1
            drafts, q_draft = drafts[:keep], q_draft[:keep]
        t1 = clock()
        # One target pass scores every draft position and the bonus row; with the token-wise rule a row becomes
        # a distribution only if the acceptance walk reaches it.
        n_rows = len(drafts) + 1
        try:
            logits = target.eval(seq[len(target.tokens):] + drafts + plan.pad, n_logits=n_rows + len(plan.pad),
                                 copy=False)[:n_rows]
        except ContextFull:  # the cache parallel slots share is full: this generation ends here
            if engine.drafter is not None:
                engine.drafter.keep(len(seq))
            return Step([], 0, 0, t1 - t0, 0.0, "length")
        p_rows: dict[int, SparseProbs] = {}

        def p_row(i: int) -> SparseProbs:
            if i not in p_rows:
                row = processed(logits[i], seq + drafts[:i] if plan.row_fn else (), plan.row_fn)
                p_rows[i] = sparse_probs(row, self.params)
            return p_rows[i]

        if self.rule == "block" and not (self.one_hot_drafts or plan.forced or plan.looked_up):
            # block verification needs every row: it weighs the whole block at once
            n_accepted, next_token = accept_block_sparse([p_row(i) for i in range(n_rows)], q_draft, drafts,
                                                         self.rng)
        else:
            n_accepted, next_token = accept_tokens_sparse(p_row, q_draft, drafts, self.rng)
        # Both caches keep seq + the accepted drafts; the next token is evaluated in the next pass.
        target.rewind(len(seq) + n_accepted)
        if engine.drafter is not None:
            engine.drafter.keep(len(seq) + n_accepted)
        t2 = clock()
        # forced drafts say nothing about the draft model, nor its costs; a pass shared with other parallel slots'
        # sequences is not this machine's cost of its rows alone: the scheduler times those steps
        if not plan.forced and getattr(target, "others_in_batch", 0) and drafts and not plan.looked_up:
            engine.batch.policy.observe_acceptance(len(drafts), n_accepted)
        elif not plan.forced and not getattr(target, "others_in_batch", 0):
            self.policy.observe(PassRecord(
                n_drafted=len(drafts), n_accepted=n_accepted, draft_seconds=t1 - t0 - catch_up - probe_step,
                verify_seconds=t2 - t1, rows=n_rows + len(plan.pad), first_step=first or None,
                run=target.same_shape_run if getattr(target, "offloaded", False) else None,
                probe_step=probe_step or None, lookup=bool(plan.looked_up)))
            if plan.looked_up:  # lookup's acceptance is its own
                self.lookup_mix.observe(len(drafts), n_accepted)
        return self._report(plan, drafts, n_accepted, next_token, t1 - t0, t2 - t1, logits)

    def _report(self, plan: _Pass, drafts: list[int], n_accepted: int, next_token: int, draft_seconds: float,
                verify_seconds: float, logits: np.ndarray) -> Step:
        """What the pass emitted (up to an end of generation or max_tokens), the grammar advanced by it."""
        new_tokens = drafts[:n_accepted] + [next_token]
        emitted: list[int] = []
        finish = eog = None
        for tok in new_tokens:
            if self.engine.target.is_eog(tok):
                finish, eog = "stop", tok
                break
            emitted.append(tok)
            if self.max_tokens is not None and self.n_emitted + len(emitted) >= self.max_tokens:
                finish = "length"
                break
        masks = None
        if self.constraint is not None:
            masks = [plan.rows.mask(new_tokens[:j]) for j in range(len(emitted) + (eog is not None))]
            self.constraint.commit(emitted)  # the tokens after an end of generation are not output
        self.seq.extend(new_tokens)
        self.n_emitted += len(emitted)
        return Step(emitted, len(drafts), n_accepted, draft_seconds, verify_seconds, finish, logits, eog, masks,
                    len(plan.forced), len(drafts) if plan.looked_up else 0)


def _draft_agreement(target, draft, n: int = WARM_UP_DRAFTED, skipped: int = WARM_UP_SKIPPED
                     ) -> tuple[int, int] | None:
    """(agreed, checked): the draft continues ``WARM_UP_PROMPT`` greedily for
    up to ``skipped + n`` tokens, the target evaluates them in one batch, and
    ``agreed`` of the ``checked`` after the first ``skipped`` are the target's
    greedy choice too. Both caches are left empty; None where the models
    cannot run it (no tokenizer, a prompt and draft that do not fit, an error)
    or the draft ends within its first ``skipped`` + 1 tokens."""
    if not hasattr(target, "tokenize"):
        return None
    total = n + skipped
    drafted: list[int] = []
    try:
        prompt = target.tokenize(WARM_UP_PROMPT)
        if len(prompt) + total > min(target.n_ctx, draft.n_ctx, target.n_batch, draft.n_batch):
            return None
        draft.rewind(0)
        row = draft.eval(prompt, n_logits=1, copy=False)[0]
        while True:
            token = int(np.argmax(row[: target.n_vocab]))
            if draft.is_eog(token):
                break
            drafted.append(token)
            if len(drafted) == total:
                break
            row = draft.eval([token], n_logits=1, copy=False)[0]
        if len(drafted) <= skipped:
            return None
        target.rewind(0)
        rows = target.eval(prompt + drafted[:-1], n_logits=len(drafted), copy=False)  # row j: after drafted[:j]
        checked = range(skipped, len(drafted))
        return sum(int(np.argmax(rows[j])) == drafted[j] for j in checked), len(checked)
    except (SpecLlamaError, ValueError):
        return None  # a check that cannot run leaves the constant prior, not a failed load
    finally:
        draft.rewind(0)
        target.rewind(0)


def _time_passes(kinds, clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """For each (model, rows) of ``kinds``: ``WARM_UP_TIMINGS`` timings of a
    pass of each row count in ``rows`` after ``WARM_UP_CONTEXT`` tokens (rows
    -> seconds; empty for a model None, or too small). An entry of ``rows``
    may be (key, rows): its timings are kept under ``key``, or not at all
    where it is None. Taken in turns, one timing of every kind a turn, in the
    order given: a slower stretch of the machine then weighs on every kind
    alike (the policy weighs the kinds against each other), not on one kind's
    five. Under ``PREFILL``, the seconds per token of evaluating those
    ``WARM_UP_CONTEXT`` tokens first, in one batch. The caches are left empty."""
    setups = []
    for model, entries in kinds:
        rows = [entry if isinstance(entry, tuple) else (entry, entry) for entry in entries]
        context = 0
        if model is not None and rows:
            context = min(WARM_UP_CONTEXT, model.n_ctx - max(n for _, n in rows), model.n_batch)
        setups.append((model, rows, context, max(getattr(model, "bos", 0), 0)))
    out: list[dict[int, list[float]]] = [{} for _ in kinds]
    timed = [(i, model, context, token) for i, (model, _, context, token) in enumerate(setups) if context >= 1]
    try:
        for i, model, context, token in timed:
            model.rewind(0)
            t0 = clock()
            model.eval([token] * context, n_logits=0)
            out[i][PREFILL] = [(clock() - t0) / context]
        for _ in range(WARM_UP_TIMINGS):
            for i, (model, rows, context, token) in enumerate(setups):
                for key, n in rows if context >= 1 else ():
                    model.rewind(context)
                    t0 = clock()
                    model.eval([token] * n, n_logits=n, copy=False)
                    if key is not None:
                        out[i].setdefault(key, []).append(clock() - t0)
    finally:
        for _, model, *_ in timed:
            model.rewind(0)
    return out


def _time_draft_step(draft, token: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """One draft step timed where the draft's cache is; the cache is left as it was."""
    n = len(draft.tokens)
    t0 = clock()
    draft.eval([token], n_logits=1, copy=False)
    seconds = clock() - t0
    draft.rewind(n)
    return seconds


class _ConstrainedRows:
    """The row transform under a constraint: the processor, then the grammar's
    mask for the tokens after the ``n_committed`` the constraint has seen
    (one mask per path, shared by the draft's and the target's row)."""

    def __init__(self, processor: Processor | None, constraint: Constraint, n_committed: int) -> None:
        self.processor, self.constraint, self.n_committed = processor, constraint, n_committed
        self._masks: dict[tuple[int, ...], np.ndarray | None] = {}

    def mask(self, path: Sequence[int]) -> np.ndarray | None:
        key = tuple(int(t) for t in path)
        if key not in self._masks:
            self._masks[key] = self.constraint.allowed(key)
        return self._masks[key]

    def __call__(self, ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.processor is not None:
            scores = self.processor(ids, scores)
        return masked(scores, self.mask(ids[self.n_committed:]))
