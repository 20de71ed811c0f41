"""The draft length that pays best, chosen from one model of costs and acceptance.

With a_i the chance that draft position i is kept once the ones before it
were (:mod:`.acceptance`), a pass with k drafts emits in expectation

    E(k) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{k-1}

tokens (Leviathan et al. 2023, with rates by position) and costs its first
draft step, k - 1 more, and a target pass of k + 1 rows (:mod:`.costs`).
Before each pass the policy takes the k with the most tokens per second in
expectation under the acceptance posterior (not at its estimates: the rate
is convex in acceptance, so where acceptance is uncertain long drafts gain
by more than they lose), at one draw of the costs from their posterior
narrowed to ``EXPLORE`` times its sd (Thompson sampling, damped), plus what
the pass is worth for what it tells of acceptance: how much the best
choice's rate would rise, in expectation, once the pass moved the estimate
as far as it may, over the passes the record
remembers, its one-off costs spread over those passes or the passes the
generation has left, where fewer (the knowledge gradient). A pass's own
one-off costs are priced over
``HORIZON`` passes or the passes the generation has left, where fewer: the
draft's catch-up after target-only passes, and on a GPU the passes that a
change of shape makes dearer. Exploring, giving drafting up and taking it up
again, close calls and keeping a draft length all follow from that one rule:
a cost whose value is uncertain is tried more the likelier a narrowed draw
makes its choice the best, a cost not timed for long grows uncertain, and
acceptance is explored where what a pass would tell of it could change the
choice, as far as that is worth. "Drafting cannot pay" is a probability: the
share of those narrowed draws of the costs in which even perfect acceptance
loses to target-only.

Three plans come before that rule: before a 1-row pass and a draft step are
timed, the 1-row pass and then the longest draft (to time them); while
decoding has not timed the 1-row pass (every choice's yardstick) and the
warm-up's doubt exceeds the timings' noise, target-only (so a process whose
warm-up timings agree better than ``PRIOR_SD`` starts with one); and on a GPU,
a draw's new shape that would not pay over the ``SETTLED`` passes it costs
more (at the estimated acceptance) gives way to the estimates' choice.

Where the draw says drafting pays but the estimates do not, and the draft
model is so far behind that its catch-up would cost more than the pass, the
pass is a probe instead where the drawn costs that a probe times (all but the
catch-up's) make drafting pay at the estimated catch-up: a target-only pass
padded to that many rows, and one draft step, timed (what the draw hinged on,
at the price of a few rows); otherwise target-only.

Exactness: the choice reads past passes and the policy's own generator,
never the current pass's draws.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .acceptance import PRIOR_WEIGHT, WEIGHTS, AcceptanceModel, expected_tokens, tokens, worth
from .costs import CATCH_UP, FIRST, NOISE_FLOOR, SETTLED, STEP, MachineModel, Prices
from .protocol import MEMORY, PassRecord, Plan, WarmUp

EXPLORE = 0.3  # the cost draws' sd, times the posterior's: less explores less, and learns slower
HORIZON = 16  # passes the rate spreads one-off costs over (the worth: MEMORY): longer pays them sooner, lost if k moves
SEED = 0  # (not tuned: the choice's own generator starts here, so runs are repeatable given the same timings)
VERDICT = 0.95  # "drafting cannot pay" is said this likely: lower skips the agreement check on thinner evidence
VERDICT_DRAWS = 64  # draws of the costs that measure that probability: more measure it finer, at a cost in each report


class MeasuredPolicy:
    """What every policy learns from the passes: costs and acceptance (and
    the words and figures they give); the choice is a subclass's."""

    def __init__(self) -> None:
        self.costs = MachineModel()
        self.acceptance = AcceptanceModel()
        self.last_rows = 0  # the last target pass's rows (a change of shape is priced on a GPU)
        self.run = 0  # passes of that shape in a row (where the engine counts them)
        self.drafting_passes = 0
        self.probes = 0
        self.warm_up_costs: dict[str, float] = {}
        self.ran: set = set()  # the kinds of pass this process has run (a first one runs cold)

    # -- what the engine tells -------------------------------------------------

    def observe(self, r: PassRecord) -> None:
        self.costs.passes += 1
        self.acceptance.fade()
        if r.n_drafted and not r.lookup:
            self.acceptance.observe(r.n_drafted, r.n_accepted)
            self.drafting_passes += 1
            first = r.first_step if r.first_step is not None else r.draft_seconds / r.n_drafted
            self._time(FIRST, first)
            if r.n_drafted > 1:
                self._time(STEP, (r.draft_seconds - first) / (r.n_drafted - 1))
        if r.probe_step is not None:
            self._time(STEP, r.probe_step)
            self.probes += 1
        if r.run is not None and r.run < SETTLED:
            self.costs.observe_switch(r.rows, r.verify_seconds)
        else:
            self._time(r.rows, r.verify_seconds)
        self.last_rows, self.run = r.rows, r.run if r.run is not None else SETTLED

    def _time(self, kind, seconds: float) -> None:
        """A timing of decoding's. The first pass of a shape in a process runs cold (llama.cpp sets up its
        graph, caches fill): it is not the kind's cost, as the warm-up's own first passes are not."""
        if kind in self.ran:
            self.costs.observe(kind, seconds)
        self.ran.add(kind)

    def observe_catch_up(self, seconds: float, n_tokens: int) -> None:
        if n_tokens > 0:
            self.costs.observe(CATCH_UP, seconds / n_tokens)

    def observe_warm_up(self, warm: WarmUp) -> None:
        """Every timing, in turns (one of each kind a turn, as the warm-up took them), and the noise from
        their spread."""
        kinds = {rows: ts for rows, ts in warm.rows.items() if ts}
        if warm.draft_steps:
            kinds[STEP] = warm.draft_steps
        logs = {kind: np.log(np.maximum(ts, 1e-9)) for kind, ts in kinds.items()}
        spread = [float(np.var(v, ddof=1)) for v in logs.values() if len(v) > 1]
        if spread:
            self.costs.noise = max(float(np.median(spread)), NOISE_FLOOR)
        self.ran.update(logs, [FIRST])  # (the warm-up ran its passes cold first; a first step is a step)
        for turn in range(max(len(v) for v in logs.values()) if logs else 0):
            for kind, v in logs.items():
                if turn < len(v):
                    self.costs.observe(kind, math.exp(float(v[turn])), warm_up=True)
        ones = [t for t in warm.switch_one_row if t > 0]
        for t in ones:
            self.costs.observe_switch(1, t)
        if warm.catch_up and warm.draft_steps:
            self.costs.prefill = float(np.median(warm.catch_up) / np.median(warm.draft_steps))
        named = {f"{kind}_row_pass" if isinstance(kind, int) else "draft_step": ts for kind, ts in kinds.items()} | {
            "1_row_pass_after_another_shape": ones, "draft_2_token_step": warm.draft_pairs,
            "draft_catch_up_token": warm.catch_up}
        self.warm_up_costs = {name: float(np.median(ts)) for name, ts in named.items() if len(ts)}

    def observe_agreement(self, agreed: int, n: int) -> None:
        self.acceptance.observe_agreement(agreed, n)

    def new_sequence(self) -> None:
        self.last_rows = 0  # the prompt's passes came between

    # -- what it gives -------------------------------------------------------------

    def prices(self, cap: int, rng: np.random.Generator | None = None, spread: float = 1.0) -> Prices | None:
        """The costs (one draw with ``rng``), None before a draft step and a 1-row pass are timed."""
        if not (self.costs.known(1) and (self.costs.known(STEP) or self.costs.known(FIRST))):
            return None
        return self.costs.prices(cap, rng, spread)

    def verify_cost(self, rows: int) -> float:
        seconds = self.costs.seconds(rows)
        if seconds is not None:
            return seconds
        prices = self.prices(rows - 1)
        return 0.0 if prices is None else math.exp(self.costs.level) * prices.verify(rows)

    def rate(self, k: int) -> float:
        prices = self.prices(k)
        if prices is None:
            return 0.0
        return expected_tokens(self.acceptance.means(k), k) / (math.exp(self.costs.level) * prices.pass_cost(k))

    def cannot_pay(self, cap: int) -> float:
        """The probability that even perfect acceptance loses to target-only, for every k in 1..cap."""
        if cap <= 0 or self.prices(cap) is None:
            return 0.0
        rng = np.random.default_rng(SEED)
        draws = [self.prices(cap, rng, EXPLORE) for _ in range(VERDICT_DRAWS)]
        return sum(all((k + 1) / p.pass_cost(k) <= 1 / p.verify(1) for k in range(1, cap + 1))
                   for p in draws) / VERDICT_DRAWS

    def verdict(self, cap: int) -> str | None:
        cannot, words = self._judgement(cap)
        return words if cannot else None

    def costs_in_words(self, cap: int) -> str:
        """Whether drafting can pay here at all, with the costs it rests on."""
        return self._judgement(cap)[1]

    def _judgement(self, cap: int) -> tuple[bool, str]:
        """Whether drafting cannot pay (that is ``VERDICT`` likely), and that in words with the costs."""
        p, chance = self.prices(cap), self.cannot_pay(cap)
        if p is None:
            return False, "drafting not measured yet"
        figures = cost_figures(p, cap, math.exp(self.costs.level))
        if chance >= VERDICT:
            return True, (f"drafting cannot pay on this machine for this pair, even if every draft were accepted "
                          f"(probability {chance:.2f}): {figures}")
        return False, (f"drafting can pay on this machine for this pair (probability it cannot, even if every draft "
                       f"were accepted: {chance:.2f}): {figures}")

    def describe(self, cap: int) -> dict:
        return {"prior_accept": self.acceptance.prior_accept,
                "warm_up_ms": {kind: 1000 * t for kind, t in self.warm_up_costs.items()},
                "acceptance_by_position": [round(a, 4) for a in self.acceptance.means(cap)],
                "cannot_pay_probability": self.cannot_pay(cap), "drafting_passes": self.drafting_passes,
                "probes": self.probes, "switch_factor": math.exp(self.costs.switch),
                "verdict": self.costs_in_words(cap)}

    def snapshot(self) -> dict:
        return {"draft_seconds": self.costs.seconds(STEP), "draft_first_seconds": self.costs.seconds(FIRST),
                "verify_seconds": {str(k): self.costs.seconds(k) for k in self.costs.kinds if isinstance(k, int)},
                **self.acceptance.snapshot(PRIOR_WEIGHT)}

    def seed(self, saved: dict) -> None:
        for kind, key in ((STEP, "draft_seconds"), (FIRST, "draft_first_seconds")):
            if isinstance(saved.get(key), (int, float)) and not self.costs.known(kind):
                self.costs.observe(kind, float(saved[key]))
        for rows, t in (saved.get("verify_seconds") or {}).items():
            if isinstance(t, (int, float)) and not self.costs.known(int(rows)):
                self.costs.observe(int(rows), float(t))
        self.acceptance.seed(saved)


class AdaptivePolicy(MeasuredPolicy):
    """The choice (see the module doc). One per engine,
    kept across generations: costs do not change between prompts."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(SEED)
        # as the engine told the last choice: the tokens the draft model lacks, and those the generation may still emit
        self.behind, self.remaining = 0, None

    def fork(self, stream: int) -> "AdaptivePolicy":
        """The policy of parallel slot ``stream``: this one's costs and acceptance (one machine, one pair), its own
        sequence's state and random generator."""
        other = AdaptivePolicy()
        other.costs, other.acceptance, other.warm_up_costs, other.ran = (
            self.costs, self.acceptance, self.warm_up_costs, self.ran)
        other.rng = np.random.default_rng([SEED, stream + 1])
        return other

    def choose(self, cap: int, *, minimum: int = 0, behind: int = 0, remaining: int | None = None) -> Plan:
        minimum, self.behind, self.remaining = min(minimum, cap), behind, remaining
        plan = self._choose(cap, minimum)
        return plan if plan.k >= minimum else Plan(minimum)

    def _choose(self, cap: int, minimum: int) -> Plan:
        if cap <= 0:
            return Plan(0)
        means = self.prices(cap)
        if means is None:  # not timed yet: the 1-row pass (every choice's yardstick), then the longest draft
            return Plan(cap if self.costs.known(1) else minimum)
        if not minimum and not self.costs.judged(1) and self.costs.doubt > self.costs.noise:
            return Plan(0)  # the warm-up in doubt (found off, or its timings steadier than the prior): time the 1-row
        draw, accept = self.prices(cap, self.rng, EXPLORE), np.array(self.acceptance.means(cap))
        estimated, worth, emitted, passes = self._worth(cap, means, accept)
        drawn = WEIGHTS @ self._priced(cap, draw, emitted[:len(WEIGHTS)], passes[:len(WEIGHTS)])
        k = self._best(minimum, drawn + worth * drawn.max())
        best = self._best(minimum, estimated + worth * estimated.max())
        if k == best:
            return Plan(k)
        # the draw explores the costs: where the draft is far behind, a probe times them without its catch-up (if
        # the drawn costs make drafting pay at the estimated catch-up; a drawn catch-up alone is no reason to run
        # one); on a GPU, a new shape that it would leave again soon is not worth its dearer passes
        if k and self.behind and not minimum and self.behind * draw.catch_up > draw.pass_cost(k) and best == 0:
            return Plan(0, pad=k if self._costs_hinge(cap, means, draw, accept, worth) else 0)
        if draw.switch > 1 and self._unsettled(k):
            rates = self._rates(cap, draw, accept, SETTLED)[0]
            if rates[k] < rates[best]:
                return Plan(best)
        return Plan(k)

    def _costs_hinge(self, cap: int, means: Prices, draw: Prices, accept: np.ndarray, worth: np.ndarray) -> bool:
        """Whether the drawn costs that a probe times (not the catch-up's) make drafting pay, at the estimated
        catch-up: what a probe can tell."""
        rates = self._rates(cap, dataclasses.replace(draw, catch_up=means.catch_up), accept, HORIZON)[0]
        return bool(self._best(0, rates + worth * rates.max()))

    def _worth(self, cap: int, prices: Prices, accept: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The rates of k = 0..cap at ``prices`` in expectation under the acceptance posterior (at its five
        quadrature points, :meth:`.AcceptanceModel.spread`: what acceptance may be beyond its estimates weighs as
        likely as it is, and long drafts gain by more than they lose from it), and what a pass of k drafts
        is worth for what it tells of acceptance (:func:`.acceptance.worth`), its one-off costs spread over the
        passes that knowledge serves (``MEMORY``), or the passes the generation has left where fewer: the draft is
        caught up once for all of them. The worth is a share of the best rate at ``MEMORY``; the choice scales it by
        the pass's own. (One computation of the rates for both, a horizon per row.) Then the tokens and passes of
        the rows read (:meth:`.AcceptanceModel.around`: the posterior's points first, which a draw of the costs
        reads too)."""
        rows = self.acceptance.around(accept)
        horizon = np.where(np.arange(len(rows)) < len(WEIGHTS), HORIZON, MEMORY)[:, None]
        emitted, passes = self._emitted(cap, rows, horizon)
        rates = self._priced(cap, prices, emitted, passes)
        return WEIGHTS @ rates[:len(WEIGHTS)], worth(rates[len(WEIGHTS):]), emitted, passes

    def _rates(self, cap: int, prices: Prices, accept: np.ndarray, horizon) -> np.ndarray:
        """Tokens per second with k = 0..cap drafts (columns), for each row of rates a_0..a_{cap-1} in ``accept``;
        one-off costs (the draft's catch-up, on a GPU a new shape's dearer first passes) spread over ``horizon``
        passes (or a column of them, one per row), or over the passes the generation has left where fewer (the
        tokens it may still emit over E(k))."""
        return self._priced(cap, prices, *self._emitted(cap, accept, horizon))

    def _emitted(self, cap: int, accept: np.ndarray, horizon) -> tuple[np.ndarray, np.ndarray]:
        """E(k) for k = 0..cap (columns) for each row of ``accept``, and the passes that one-off costs spread over."""
        emitted = tokens(np.atleast_2d(accept)[:, :cap])
        passes = np.minimum(horizon, self.remaining / emitted) if self.remaining else horizon
        return emitted, passes

    def _priced(self, cap: int, prices: Prices, emitted: np.ndarray, passes) -> np.ndarray:
        """:meth:`_rates` from the tokens and passes of :meth:`_emitted`."""
        verify = np.fromiter(map(prices.verify, range(1, cap + 2)), float, cap + 1)
        cost = verify.copy()
        if prices.step is not None:
            cost[1:] = (prices.first + np.arange(cap) * prices.step) + verify[1:]
        one_off = np.full(cap + 1, self.behind * prices.catch_up)
        one_off[0] = 0.0
        if prices.switch > 1:
            unsettled = np.array([self._unsettled(k) for k in range(cap + 1)])
            one_off = one_off + np.minimum(unsettled, passes) * ((prices.switch - 1) * verify)
        return emitted / (cost + one_off / passes)

    @staticmethod
    def _best(minimum: int, values: np.ndarray) -> int:
        return minimum + int(np.argmax(values[minimum:]))

    def _unsettled(self, k: int) -> int:
        """On a GPU, the passes of k's shape that cost more until it settles: SETTLED - 1 for a new shape, fewer for
        the last pass's shape (none once settled)."""
        return max(SETTLED - 1 - (self.run if k + 1 == self.last_rows else 0), 0)

    def drafting(self, cap: int) -> bool:
        """Whether drafting pays on the estimates at a generation's start, with nothing to catch up and no end told
        yet (the draft is fed the prompt then, and caught up later otherwise)."""
        self.behind, self.remaining = 0, None  # (the last generation's: the next choice tells its own)
        prices = self.prices(cap)
        if prices is None or cap <= 0:
            return cap > 0
        return self._best(0, self._rates(cap, prices, np.array(self.acceptance.means(cap)), HORIZON)[0]) > 0


class FixedPolicy:
    """k drafts in every pass that has room (``--draft-fixed``). What it is
    told and asked besides goes to ``measured`` (the engine's own policy, so
    that its costs and acceptance keep learning from fixed passes too)."""

    def __init__(self, k: int, measured: MeasuredPolicy | None = None) -> None:
        self.k = k
        self.measured = measured if measured is not None else MeasuredPolicy()

    def choose(self, cap: int, *, minimum: int = 0, behind: int = 0, remaining: int | None = None) -> Plan:
        return Plan(max(min(self.k, cap), 0))

    def drafting(self, cap: int) -> bool:
        return self.k > 0 and cap > 0

    def __getattr__(self, name: str):  # observe..., verdict, rate, describe, snapshot, seed: the measured policy's
        return getattr(self.measured, name)


def warm_up_rows(cap: int) -> tuple[int, ...]:
    """The target passes the warm-up at load times: one row, two and ``cap`` + 1
    (a second row costs far more than each row after it: llama.cpp leaves its one-row path)."""
    return tuple(sorted({1, 2, cap + 1})) if cap >= 1 else (1,)


def cost_figures(p: Prices, cap: int, scale: float) -> str:
    """The costs in words: a draft step against a target step, and the widest verify against one row."""
    one, full = p.verify(1) * scale, p.verify(cap + 1) * scale
    step = (p.step or 0.0) * scale
    return (f"draft step {1000 * step:.1f} ms vs target step {1000 * one:.1f} ms ({step / one:.2f}x); "
            f"verify of {cap + 1} rows {1000 * full:.1f} ms vs one row {1000 * one:.1f} ms ({full / one:.2f}x)")
