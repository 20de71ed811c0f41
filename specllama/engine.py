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

import functools
import inspect
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import numpy as np

from .adaptive import DEFAULT_DRAFT_MAX, WARM_UP_TIMINGS, DraftLengthPolicy
from .constraint import Constraint, masked
from .drafters import PROMPT_LOOKUP, Drafter, ModelDrafter, PromptLookupDrafter
from .errors import SpecLlamaError
from .lookup_mix import LookupMix
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
        self._noticed = False  # the "drafting cannot pay" notice was given (once per loaded pair)
        self._draft_synced = True  # the draft model holds a prefix of the sequence being decoded
        #: llama-server's --cache-reuse: cached runs of at least this many tokens that a new prompt
        #: holds further on are shifted into place in both caches instead of evaluated (0: off)
        self.cache_reuse = 0
        #: with a draft model: prompt-lookup drafts taken instead of its drafts in the passes where
        #: they promise more (:class:`~specllama.lookup_mix.LookupMix`; None: the draft model's only)
        self.lookup_mix: LookupMix | None = None

    def warm_up(self, cap: int = DEFAULT_DRAFT_MAX) -> None:
        """Run both models' first, slow passes now, not in the user's first
        generation, and give the policy the median of ``WARM_UP_TIMINGS``
        timings each of the target passes of :func:`~specllama.adaptive.warm_up_rows`
        (1, 2 and cap + 1 rows) and of a draft step, with ``WARM_UP_CONTEXT`` tokens in the cache, and the share of a
        short greedy draft that the target agrees with (:func:`_draft_agreement`;
        not measured where even perfect acceptance cannot pay on these costs,
        which is then said once in the log)."""
        from .adaptive import warm_up_rows  # here: benchmarks/policy_sim.py loads older policies without it

        timed = warm_up_rows(cap)
        verify = self.target.warm_up(timed) if hasattr(self.target, "warm_up") else {}  # cold passes
        if self.draft is not None and hasattr(self.draft, "warm_up"):
            self.draft.warm_up((1,))
        rows = [n for n in timed if n in verify]
        drafts = self.draft is not None and bool(self.drafter)
        # in a generation's order: a draft step, then verify passes, most rows first (one row after a target pass).
        # On a GPU each row count is timed as the third of its shape in a row, as target-only decoding and a fixed
        # draft length pay it (adaptive.SETTLED: llama.cpp replays a CUDA graph from the third pass of a shape in a
        # row), and one row right after the 2-row pass is timed apart. On a CPU the two cost the same
        # (benchmarks/runs/gpu-2026-12-04/switch_cpu.txt), and the passes between made the demo pair's warm-up
        # 1.7x as long there (warm_up_time.txt).
        settle = 1 in rows and getattr(self.target, "offloaded", False)
        target_rows = rows[::-1] if not settle else [
            entry for n in rows[::-1] if n != 1 for entry in ((None, n), (None, n), n)] + [(SWITCH, 1), (None, 1), 1]
        steps, timings = _time_passes([(self.draft if drafts else None, [1]), (self.target, target_rows)])
        steps = steps.get(1, [])
        switch = timings.pop(SWITCH, [])
        observe = getattr(self.policy, "observe_warm_up", None)
        if observe is not None:
            observe(steps, timings, **({"switch_one_row": switch} if switch and _takes(observe, "switch_one_row")
                                       else {}))
        observe_agreement = getattr(self.policy, "observe_agreement", None)
        if observe_agreement is not None and steps and not getattr(self.policy, "cannot_pay", lambda _: False)(cap):
            agreement = _draft_agreement(self.target, self.draft)
            if agreement is not None:
                observe_agreement(*agreement)
        else:
            self.policy.seed({"draft_seconds": statistics.median(steps) if steps else None,
                              "verify_seconds": {n: statistics.median(ts) for n, ts in timings.items()}})

    def _run_of(self, target, method: str) -> dict:
        """On a GPU, the ``run`` keyword for the policy's ``method``: how many target passes of the last one's
        shape came in a row (adaptive.SETTLED); nothing on a CPU, or to a policy whose method takes none."""
        if not getattr(target, "offloaded", False) or not _takes(getattr(self.policy, method), "run"):
            return {}
        return {"run": target.same_shape_run}

    def _notice(self, cap: int) -> None:
        """Once per loaded pair: the policy decodes target-only because even
        perfect acceptance cannot pay, with the measured costs."""
        if self._noticed or self.drafter is None or not getattr(self.policy, "cannot_pay", lambda _: False)(cap):
            return
        self._noticed = True
        log.warning("specllama: %s; decoding target-only (costs are measured again now and then)",
                    self.policy.verdict(cap))

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

    def feeds_draft(self, draft_max: int, adaptive: bool) -> bool:
        """Whether a generation feeds the draft model its prompt: it drafts,
        and (adaptive) the policy is drafting. While the policy decodes
        target-only the draft is not fed: it catches up, lazily and timed,
        when drafting resumes."""
        return self.drafter is not None and draft_max > 0 and (
            not adaptive or getattr(self.policy, "drafting", lambda _: True)(draft_max))

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
            adaptive: choose each pass's draft length from measured costs and
                acceptance (:mod:`specllama.adaptive`); False drafts exactly
                ``draft_max`` whenever there is room.
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
        target, drafter = self.target, self.drafter
        if drafter is None:
            draft_max = 0
        n_vocab = target.n_vocab
        # With one-hot drafts (greedy sampling, prompt lookup) block verification
        # has exactly the token-wise rule's law, so the cheaper lazy walk serves.
        one_hot_drafts = params.greedy or isinstance(drafter, PromptLookupDrafter)
        seq = list(prompt_tokens)
        feed = self.feeds_draft(draft_max, adaptive)
        self.prefill(seq, draft=feed)
        self._draft_synced = feed
        if adaptive and hasattr(self.policy, "new_sequence"):
            self.policy.new_sequence(len(seq) - 1, draft_fed=feed)
        if adaptive and draft_max > 0:
            self._notice(draft_max)
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
            room_k = k
            pad: list[int] = []  # a padded target-only pass times the costs again (rows past the first unused)
            row_fn = processor
            forced: list[int] = []
            if constraint is not None:
                if constraint.done:
                    # the grammar is complete and allows only the end: no other target pass
                    yield Step([], 0, 0, 0.0, 0.0, "stop")
                    return
                row_fn = rows = _ConstrainedRows(processor, constraint, len(seq))
                if forced_drafts and k > 0:
                    # a function of the emitted tokens only, like every choice of k
                    forced = constraint.forced()[:k]
            if adaptive and not forced:
                # Fixed before this pass draws anything: past passes only.
                k = self.policy.choose(k, minimum=draft_min)
            looked_up: list[int] = []
            if self.lookup_mix is not None and not forced and drafter is not None:
                # from the committed sequence and past passes only, like k
                looked_up = self.lookup_mix.plan(seq, room_k, self.policy, k, target.is_eog)
            if adaptive and not forced and not looked_up:
                take_probe = getattr(self.policy, "take_probe", None)
                if k == 0 and take_probe is not None:
                    pad = [seq[-1]] * min(max(take_probe() - 1, 0), room_k)

            t0 = time.perf_counter()
            draft_tokens: list[int] = []
            q_draft: list[SparseProbs] = []
            catch_up = probe_step = 0.0
            if forced or looked_up:
                draft_tokens = forced or looked_up
                q_draft = [one_hot(t) for t in draft_tokens]
            elif k > 0:
                model = getattr(drafter, "model", None)
                if model is not None and (not self._draft_synced or len(seq) - len(model.tokens) > 2):
                    # the draft skipped the prompt or target-only passes: it catches up now, a cost of this pass
                    n_behind = len(seq) - 1 - common_prefix_len(model.tokens, seq)
                    drafter.prefill(seq[:-1], self.cache_reuse)
                    catch_up = time.perf_counter() - t0
                    self._draft_synced = True
                    if hasattr(self.policy, "observe_catch_up"):
                        self.policy.observe_catch_up(catch_up, max(n_behind, 0))
                draft_tokens, q_draft = drafter.propose(seq, k, params, rng, row_fn, n_vocab)
            elif pad and self.draft is not None and len(self.draft.tokens) < self.draft.n_ctx:
                probe_step = _time_draft_step(self.draft, seq[-1])
            if constraint is not None and draft_tokens:
                # A draft the grammar forbids (a one-hot draft can be one) stays as the last
                # draft: its masked target row gives it probability 0, so it is rejected there.
                keep = constraint.legal_prefix(draft_tokens) + 1
                draft_tokens, q_draft = draft_tokens[:keep], q_draft[:keep]
            t1 = time.perf_counter()

            # One target pass scores every draft position and the bonus row;
            # with the token-wise rule a row becomes a distribution only if
            # the acceptance walk reaches it.
            n_rows = len(draft_tokens) + 1
            logits = target.eval(seq[len(target.tokens):] + draft_tokens + pad, n_logits=n_rows + len(pad),
                                 copy=False)[:n_rows]
            p_rows: dict[int, SparseProbs] = {}

            def p_row(i: int) -> SparseProbs:
                if i not in p_rows:
                    row = processed(logits[i], seq + draft_tokens[:i] if row_fn else (), row_fn)
                    p_rows[i] = sparse_probs(row, params)
                return p_rows[i]

            if rule == "block" and not (one_hot_drafts or forced or looked_up):
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
            if pad:
                self.policy.observe_probe(1 + len(pad), t2 - t1, probe_step or None)
            elif looked_up:  # the target's cost of these rows; lookup's acceptance is its own
                self.lookup_mix.observe(len(draft_tokens), n_accepted)
                self.policy.observe_verify(n_rows, t2 - t1, reopen=False, **self._run_of(target, "observe_verify"))
            elif not forced:  # forced drafts say nothing about the draft model
                # the draft steps' cost; a catch-up was told to the policy apart (it counts in the Step's time)
                self.policy.observe(len(draft_tokens), n_accepted, t1 - t0 - catch_up, t2 - t1,
                                    first_step=getattr(drafter, "first_step_seconds", None),
                                    **self._run_of(target, "observe"))

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
            masks = None
            if constraint is not None:
                masks = [rows.mask(new_tokens[:j]) for j in range(len(emitted) + (eog is not None))]
                constraint.commit(emitted)  # the tokens after an end of generation are not output
            seq.extend(new_tokens)
            n_emitted += len(emitted)
            yield Step(emitted, len(draft_tokens), n_accepted, t1 - t0, t2 - t1, finish, logits, eog, masks,
                       len(forced), len(draft_tokens) if looked_up else 0)
            if finish is not None:
                return


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


def _takes(method, name: str) -> bool:
    """Whether ``method`` takes the keyword ``name`` (a policy of the caller's own may not)."""
    return _takes_cached(getattr(method, "__func__", method), name)


@functools.lru_cache(maxsize=64)
def _takes_cached(function, name: str) -> bool:
    params = inspect.signature(function).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _time_passes(kinds) -> list[dict]:
    """For each (model, rows) of ``kinds``: ``WARM_UP_TIMINGS`` timings of a
    pass of each row count in ``rows`` after ``WARM_UP_CONTEXT`` tokens (rows
    -> seconds; empty for a model None, or too small). An entry of ``rows``
    may be (key, rows): its timings are kept under ``key``, or not at all
    where it is None. Taken in turns, one timing of every kind a turn, in the
    order given: a slower stretch of the machine then weighs on every kind
    alike (the policy weighs the kinds against each other), not on one kind's
    five. The caches are left empty."""
    setups = []
    for model, entries in kinds:
        rows = [entry if isinstance(entry, tuple) else (entry, entry) for entry in entries]
        context = 0
        if model is not None and rows:
            context = min(WARM_UP_CONTEXT, model.n_ctx - max(n for _, n in rows), model.n_batch)
        setups.append((model, rows, context, max(getattr(model, "bos", 0), 0)))
    out: list[dict[int, list[float]]] = [{} for _ in kinds]
    timed = [(model, rows, context, token) for model, rows, context, token in setups if context >= 1]
    try:
        for model, _, context, token in timed:
            model.rewind(0)
            model.eval([token] * context, n_logits=0)
        for _ in range(WARM_UP_TIMINGS):
            for i, (model, rows, context, token) in enumerate(setups):
                for key, n in rows if context >= 1 else ():
                    model.rewind(context)
                    t0 = time.perf_counter()
                    model.eval([token] * n, n_logits=n, copy=False)
                    if key is not None:
                        out[i].setdefault(key, []).append(time.perf_counter() - t0)
    finally:
        for model, *_ in timed:
            model.rewind(0)
    return out


def _time_draft_step(draft, token: int) -> float:
    """One draft step timed where the draft's cache is; the cache is left as it was."""
    n = len(draft.tokens)
    t0 = time.perf_counter()
    draft.eval([token], n_logits=1, copy=False)
    seconds = time.perf_counter() - t0
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
