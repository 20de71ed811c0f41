"""The draft length of parallel slots running together (:mod:`specllama.slots`).

A step of S running slots is a few draft steps (each one batched draft decode for
every drafting slot), then one target pass of R rows (k + 1 per slot), then every
slot's own work: sampling, acceptance, text. The scheduler times each step, from one
target pass's end to the next's, and counts its rows R, draft decodes K and the
draft tokens D they held. Its cost is modelled as linear in them, T = c_0 + c_rows R
+ c_decode K + c_draft D (a slot's own work in a step counts in its rows: without
drafts a slot is one row; a draft decode costs much whatever it holds, on a CPU a
quantized draft's nearly a target pass), fitted by discounted least squares with its
uncertainty (Bayesian linear regression, the prior taken from the lone policy's
costs, which its warm-up measured).

Every running slot drafts the same k: the one with the most tokens per second for
the batch, S E(k) / T(S (k + 1), k, S k), under one draw from the posterior of the costs
and of the acceptance (Thompson sampling; the lone policy draws the costs only): a k whose value is
uncertain is tried in proportion to the chance that it is the best. Each slot's best
answer to the others' k alone would have them all draft where none drafting is
faster; the batch's choice prices that. One choice per step, from past steps only: the k of a step never
depends on its draws.
"""

from __future__ import annotations

import math

import numpy as np

from .acceptance import tokens
from .adaptive import EXPLORE, HORIZON, SEED, MeasuredPolicy
from .costs import OUTLIER, PRIOR_SD, STEP
from .protocol import MEMORY


class BatchPolicy:
    """One per set of slots: the steps' cost model, and the draft length of each step."""

    def __init__(self, lone: MeasuredPolicy) -> None:
        self.lone = lone
        self.rng = np.random.default_rng([SEED, 1 << 20])
        self._precision: np.ndarray | None = None  # of (c_0, c_rows, c_decode, c_draft), in 1/s^2
        self._weighted: np.ndarray | None = None  # precision @ mean
        self.noise = 0.0  # a step's residual variance (s^2)
        self.steps = 0
        self._chosen: tuple[int, int, int] | None = None  # (step, slots, cap) -> the k chosen for it
        self._k = 0

    # -- the scheduler tells -----------------------------------------------------------

    def observe_step(self, seconds: float, rows: int, draft_decodes: int, draft_tokens: int) -> None:
        """One step: ``seconds`` from the last target pass's end to this one's, this target pass's ``rows``, and
        ``draft_decodes`` between them, holding ``draft_tokens``."""
        if not self._start():
            return
        x = np.array([1.0, rows, draft_decodes, draft_tokens])
        predicted = float(x @ self.mean())
        if predicted > 0:
            # the outlier cut of the lone costs: a step slowed by other work (or sped up) counts as at most
            # OUTLIER off the fit, so a moment's stall moves the fit a little, and a fit far off follows the
            # steps in a few of them
            seconds = min(max(seconds, predicted * math.exp(-OUTLIER)), predicted * math.exp(OUTLIER))
        keep = 1 - 1 / MEMORY
        prior_p, prior_w = self._prior()
        # discount toward the prior, then add the step
        self._precision = keep * self._precision + (1 - keep) * prior_p + np.outer(x, x) / self._noise()
        self._weighted = keep * self._weighted + (1 - keep) * prior_w + x * seconds / self._noise()
        residual = seconds - float(x @ self.mean())
        self.noise += (residual ** 2 - self.noise) / min(self.steps + 1, MEMORY)
        self.steps += 1

    def observe_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        """A shared pass's drafts: what the lone policy learns of acceptance too (one pair, one acceptance)."""
        self.lone.acceptance.fade()
        self.lone.acceptance.observe(n_drafted, n_accepted)

    # -- the slots ask ----------------------------------------------------------------------

    def choose(self, cap: int, slots: int, step: int, behind: int = 0) -> int:
        """The draft length of step ``step`` for each of ``slots`` running slots (``cap`` at most), whose draft
        models lack ``behind`` tokens in all: drafting first catches them up, a one-off cost priced over
        ``HORIZON`` steps (the lone policy also bounds that by the passes its generation has left)."""
        if cap <= 0 or not self._start():
            return 0
        if self._chosen == (step, slots, cap):
            return self._k
        cov = np.linalg.inv(self._precision)
        c = self.rng.multivariate_normal(self.mean(), cov * EXPLORE ** 2)
        emitted = tokens(np.array(self.lone.acceptance.sample(cap, self.rng, 1 / EXPLORE ** 2)))[0]  # E(k), k = 0..cap
        catch_up = (c[2] + c[3] * behind) / HORIZON if behind else 0.0  # one more draft decode, of every token behind
        self._k = max(range(cap + 1), key=lambda k: self._rate(k, slots, c, emitted[k], catch_up))
        self._chosen = (step, slots, cap)
        return self._k

    def mean(self) -> np.ndarray:
        return np.linalg.solve(self._precision, self._weighted)

    def describe(self) -> dict:
        if not self._start():
            return {}
        c = self.mean()
        return {"steps": self.steps,
                "step_ms": {"base": 1000 * c[0], "per_row": 1000 * c[1], "per_draft_decode": 1000 * c[2],
                            "per_draft_token": 1000 * c[3]}}

    # -- within ---------------------------------------------------------------------------

    @staticmethod
    def _rate(k: int, slots: int, c: np.ndarray, emitted: float, catch_up: float = 0.0) -> float:
        """The batch's tokens per second with k drafts, each slot's pass emitting ``emitted`` = E(k)."""
        seconds = c[0] + c[1] * slots * (k + 1) + c[2] * k + c[3] * slots * k + (catch_up if k else 0.0)
        return slots * emitted / seconds if seconds > 0 else 0.0

    def _prior_terms(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The prior's mean of (c_0, c_rows, c_decode, c_draft), from the lone policy's costs, which its warm-up
        timed: per row, the slope of the target passes from two rows to the widest (one row is llama.cpp's own
        path), and the base under it; per draft token what a second token adds to a draft decode (not timed: half
        a step), and per draft decode a draft step less that. And the sd the timings' noise leaves each."""
        lone, warm = self.lone, self.lone.warm_up_costs
        rows = sorted(r for r in lone.costs.kinds if isinstance(r, int) and r >= 2)
        step = lone.costs.seconds(STEP)
        if not rows or step is None or not lone.verify_cost(1):
            return None
        low, high = rows[0], rows[-1]
        a, b = lone.verify_cost(low), lone.verify_cost(high)
        per_row = (b - a) / (high - low) if high > low else a - lone.verify_cost(1)
        pair = warm["draft_2_token_step"] - warm["draft_step"] if "draft_2_token_step" in warm else step / 2
        noise = math.sqrt(lone.costs.noise)
        return (np.array([a - low * per_row, per_row, step - pair, pair]),
                noise * np.array([a, math.hypot(a, b) / max(high - low, 1), step, math.hypot(step, step + pair)]))

    def _prior(self) -> tuple[np.ndarray, np.ndarray]:
        """Each coefficient in doubt by as much as a warm-up's cost (``PRIOR_SD``) and its timings' noise."""
        mean, spread = self._prior_terms()
        mean = np.maximum(mean, 0.0)
        precision = np.diag(1 / ((PRIOR_SD * mean) ** 2 + spread ** 2))
        return precision, precision @ mean

    def _noise(self) -> float:
        """A step's noise variance: the steps' own, at least a 1-row pass's timing's (the warm-up's spread)."""
        return max(self.noise, self.lone.costs.noise * self.lone.verify_cost(1) ** 2)

    def _start(self) -> bool:
        """Whether the lone policy's costs give a prior yet (from then on, the model is there)."""
        if self._precision is None:
            if self._prior_terms() is None:
                return False
            self._precision, self._weighted = self._prior()
        return True


class Batch:
    """What the slots' engines share: the batch policy, the sequences running now, and the step (target passes so
    far; a step's draft length is chosen once)."""

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self.running: set[int] = set()
        self.behind: dict[int, int] = {}  # per running sequence, the tokens its draft model lacks
        self.step = 0
