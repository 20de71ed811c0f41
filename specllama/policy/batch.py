"""The draft length of parallel slots running together (:mod:`specllama.slots`).

A step of S running slots is a few draft steps (each one batched draft decode for
every drafting slot), then one target pass of R rows (k + 1 per slot), then every
slot's own work: sampling, acceptance, text. The scheduler times each step, from one
target pass's end to the next's, and counts its slots S, rows R, draft decodes K
and the draft tokens D they held. Its cost is modelled as linear in them, T = c_0 +
c_slot S + c_rows R + c_decode K + c_draft D (each slot's own work in a step; a draft
decode costs much whatever it holds, on a CPU a quantized draft's nearly a target
pass; a draft token adds its slot's sampling),
fitted by discounted least squares with its uncertainty (Bayesian linear regression,
the prior taken from the lone policy's costs, which its warm-up measured).

Every running slot drafts the same k: the one with the most tokens per second for
the batch, S E(k) / T(S, S (k + 1), k, S k), under one draw from the posterior of the costs
and of the acceptance (Thompson sampling, as the lone policy): a k whose value is
uncertain is tried in proportion to the chance that it is the best. Each slot's best
answer to the others' k alone would have them all draft where none drafting is
faster; the batch's choice prices that. One choice per step, from past steps only: the k of a step never
depends on its draws.
"""

from __future__ import annotations

import math

import numpy as np

from .acceptance import expected_tokens
from .adaptive import EXPLORE, HORIZON, SEED, MeasuredPolicy
from .costs import OUTLIER

MEMORY = 64  # steps a timing is remembered for (discount 1 - 1/MEMORY): longer fits finer, follows load slower
PRIOR_DOUBT = 0.5  # the prior's sd, as a share of each coefficient: more lets the steps overrule the warm-up sooner
DRAFT_TOKEN = 0.25  # the prior of a draft token's cost beyond its decode's, as a share of a lone draft step
SLOT = 0.1  # the prior of a slot's own work in a step, as a share of a lone 1-row pass


class BatchPolicy:
    """One per set of slots: the steps' cost model, and the draft length of each step."""

    def __init__(self, lone: MeasuredPolicy) -> None:
        self.lone = lone
        self.rng = np.random.default_rng([SEED, 1 << 20])
        self._precision: np.ndarray | None = None  # of (c_0, c_slot, c_rows, c_decode, c_draft), in 1/s^2
        self._weighted: np.ndarray | None = None  # precision @ mean
        self.noise = 0.0  # a step's residual variance (s^2)
        self.steps = 0
        self._chosen: tuple[int, int, int] | None = None  # (step, slots, cap) -> the k chosen for it
        self._k = 0

    # -- the scheduler tells -----------------------------------------------------------

    def observe_step(self, seconds: float, slots: int, rows: int, draft_decodes: int, draft_tokens: int) -> None:
        """One step: ``seconds`` from the last target pass's end to this one's, ``slots`` in this target pass
        and its ``rows``, ``draft_decodes`` between them, holding ``draft_tokens``."""
        if not self._start():
            return
        x = np.array([1.0, slots, rows, draft_decodes, draft_tokens])
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
        ``HORIZON`` steps, as the lone policy prices its own."""
        if cap <= 0 or not self._start():
            return 0
        if self._chosen == (step, slots, cap):
            return self._k
        cov = np.linalg.inv(self._precision)
        c = self.rng.multivariate_normal(self.mean(), cov * EXPLORE ** 2)
        accept = self.lone.acceptance.sample(cap, self.rng, 1 / EXPLORE ** 2)
        catch_up = (c[3] + c[4] * behind) / HORIZON if behind else 0.0  # one more draft decode, of every token behind
        self._k = max(range(cap + 1), key=lambda k: self._rate(k, slots, c, accept, catch_up))
        self._chosen = (step, slots, cap)
        return self._k

    def mean(self) -> np.ndarray:
        return np.linalg.solve(self._precision, self._weighted)

    def describe(self) -> dict:
        if not self._start():
            return {}
        c = self.mean()
        return {"steps": self.steps,
                "step_ms": {"base": 1000 * c[0], "per_slot": 1000 * c[1], "per_row": 1000 * c[2],
                            "per_draft_decode": 1000 * c[3], "per_draft_token": 1000 * c[4]}}

    # -- within ---------------------------------------------------------------------------

    @staticmethod
    def _rate(k: int, slots: int, c: np.ndarray, accept: list[float], catch_up: float = 0.0) -> float:
        seconds = c[0] + c[1] * slots + c[2] * slots * (k + 1) + c[3] * k + c[4] * slots * k + (catch_up if k else 0.0)
        return slots * expected_tokens(accept, k) / seconds if seconds > 0 else 0.0

    def _prior_mean(self) -> np.ndarray | None:
        """From the lone policy's costs: a 1-row pass as the base, ``SLOT`` of it per slot, the step from it to
        two rows per row, a draft step per draft decode, and ``DRAFT_TOKEN`` of one per draft token."""
        one, two = self.lone.verify_cost(1), self.lone.verify_cost(2)
        prices = self.lone.prices(1)
        if not one or prices is None or prices.step is None:
            return None
        step = float(np.exp(self.lone.costs.level)) * prices.step
        return np.array([one, SLOT * one, max(two - one, 0.02 * one), step, DRAFT_TOKEN * step])

    def _prior(self) -> tuple[np.ndarray, np.ndarray]:
        mean = self._prior_mean()
        precision = np.diag(1 / (PRIOR_DOUBT * np.maximum(mean, 1e-6)) ** 2)
        return precision, precision @ mean

    def _noise(self) -> float:
        base = self._prior_mean()
        return max(self.noise, (0.1 * base[0]) ** 2) if base is not None else 1.0

    def _start(self) -> bool:
        """Whether the lone policy's costs give a prior yet (from then on, the model is there)."""
        if self._precision is None:
            if self._prior_mean() is None:
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
