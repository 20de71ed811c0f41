"""What a pass costs on this machine: one model of every timing.

Each timing of a kind (a draft step; a pass's first draft step; a target
pass of r rows; a token of the draft's catch-up) is one noisy observation

    log seconds = level + offset(kind) + noise,

of a *machine level* that all kinds share and that drifts (another process
gets busy, the CPU clocks down), and an *offset* of its kind. Every timing
moves the level and its own kind's offset by their variances against the
noise (a Kalman gain: the level's share is ``LEVEL_GAIN`` at most, so a
change of the whole machine is followed within about 1 / ``LEVEL_GAIN``
timings), so a kind that is not being timed (the 1-row pass, while the
policy drafts) still follows the machine; decisions read the offsets, which are ratios between
kinds, and a busier machine leaves the drafting-versus-target-only
comparison alone. A residual beyond ``OUTLIER`` (a cold pass, a moment of
another process) counts as that much and no more. An offset drifts too: its
uncertainty is the noise over its timings, plus a timing's noise over
``NOISE_MEMORY`` squared for every pass since it was last timed, so a kind
timed every pass follows about its last ``NOISE_MEMORY`` timings, as the
estimate of the noise does; a cost not timed for long is doubted, and the
choice (:mod:`.adaptive`) then times it again where it matters. A cost
that only the warm-up timed is in doubt besides by how far decoding found
the warm-up off on the kinds it has timed since (the warm-up times the
models alone, not the sampling, nor a GPU's other shapes around a pass),
a prior of ``PRIOR_SD`` weighing as one of them.

Target passes of two rows or more share a smoothness prior: their costs
(relative to the level, exp(offset)) lie on one curve (a Whittaker
smoother) through every timed row count, weighted by the timings behind
each, its second differences weighing as much as a row count timed every
pass (about ``NOISE_MEMORY`` timings: what an offset that drifts can hold).
One row stays apart: llama.cpp's one-row path costs far less than the second
row adds.

On a GPU a pass right after a pass of another shape costs more (CUDA graphs
replay only from the third pass of a shape in a row, :data:`SETTLED`): the
engine says which passes settled, and the switches' extra is a ratio of its
own (:attr:`MachineModel.switch`), which prices a change of draft length.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

# a timing's share that moves the shared level: higher follows a busier machine sooner, and a lone timing more
LEVEL_GAIN = 0.2
# log sd of a timing's noise and of the warm-up's bias until timings show theirs: larger re-times warm-up costs sooner
PRIOR_SD = 0.05
# the most a timing's surprise counts (log ratio): smaller shrugs off more of a busy moment, and follows a change slower
OUTLIER = math.log(2.0)
# timings the noise, an offset (drift: noise / NOISE_MEMORY^2 a pass) and the row curve weigh: longer is finer, slower
NOISE_MEMORY = 32
SETTLED = 3  # on a GPU, the pass of a shape from which on it costs what that shape costs (CUDA graphs)

NOISE_FLOOR = 1e-4  # (not tuned: timings are never exact to 1%, and a floor keeps every variance positive)

STEP, FIRST, CATCH_UP = "step", "first", "catch_up"  # kinds other than a target pass (whose kind is its rows)


@dataclass
class _Kind:
    offset: float  # log seconds above the level
    var: float  # its variance when last timed
    at: int  # the pass it was last timed at
    warm: bool = False  # only the warm-up has timed it


@functools.lru_cache(maxsize=16)
def _roughness(size: int) -> np.ndarray:
    """D'D for D the second differences of ``size`` values."""
    second = np.diff(np.eye(size), 2, axis=0)
    return second.T @ second


def curve(values: dict[int, float], weights: dict[int, float], rows: range, scale: float = 0.0,
          rng: np.random.Generator | None = None) -> dict[int, float]:
    """Row count -> value for every count in ``rows``, on one smooth curve through ``values`` (timed counts, each
    weighing ``weights`` timings): the posterior of v under sum_r w_r (v_r - values_r)^2 + NOISE_MEMORY
    sum_r (second difference of v at r)^2 (a Whittaker smoother; two counts give the line through them, and a
    count not timed lies on the curve, with more doubt the further it is from the timed ones). Its mean, or with
    ``rng`` one draw, a timing's variance being ``scale``."""
    low = rows.start
    size = len(rows)
    w, y = np.zeros(size), np.zeros(size)
    for r, v in values.items():
        w[r - low], y[r - low] = weights[r], v
    precision = np.diag(w) + NOISE_MEMORY * _roughness(size)
    mean = np.linalg.solve(precision, w * y)
    if rng is not None and scale > 0:  # P = L L': a draw is mean + sqrt(scale) L'^-1 z (its covariance P^-1)
        mean = mean + math.sqrt(scale) * np.linalg.solve(np.linalg.cholesky(precision).T, rng.standard_normal(size))
    return dict(zip(rows, mean.tolist()))


@dataclass
class MachineModel:
    """The level, the offsets and their uncertainty (see the module doc)."""

    level: float | None = None
    kinds: dict = field(default_factory=dict)  # kind -> _Kind
    noise: float = PRIOR_SD ** 2  # variance of a timing's residual (log units)
    switch: float = 0.0  # on a GPU: a switch's extra over a settled pass of its rows (log ratio)
    switches: int = 0  # the switch timings behind it (at most NOISE_MEMORY count)
    # a token of the draft's catch-up, times a draft step, until decoding times a catch-up: the warm-up's prefill of a
    # short prompt (a step where it timed none: a decode of n tokens costs at most n steps)
    prefill: float = 1.0
    doubt: float = PRIOR_SD ** 2  # the variance of a warm-up cost's bias against decoding's
    n_judged: int = 1  # the kinds whose bias that rests on (the prior's one included)
    passes: int = 0  # the clock of staleness: the engine's passes

    # -- timings -------------------------------------------------------------

    def observe(self, kind, seconds: float, *, warm_up: bool = False) -> None:
        """One timing of ``kind`` (rows of a target pass, or STEP, FIRST, CATCH_UP per token), the warm-up's or
        decoding's. Its surprise is split between the level and the kind's offset by their variances (a Kalman
        filter's update): a kind known well moves the level, a kind in doubt moves its own offset."""
        if not seconds > 0:
            return
        y = math.log(seconds)
        if self.level is None:
            self.level = y
        known = self.kinds.get(kind)
        if known is None:  # a new kind: what is left after the level
            self.kinds[kind] = _Kind(y - self.level, self.noise, self.passes, warm_up)
            return
        v_level = self.noise * LEVEL_GAIN / (1 - LEVEL_GAIN)
        if known.warm and not warm_up:  # decoding's first timing of it judges the warm-up's
            known.warm = False
            bias = min(OUTLIER, abs(y - self.level - known.offset)) ** 2 - self.uncertainty(kind) - v_level - self.noise
            self.doubt = (self.doubt * self.n_judged + max(bias, 0.0)) / (self.n_judged + 1)
            self.n_judged += 1
            known.var += self.doubt  # this kind's cost was in doubt by as much as the warm-up is off
        v = self.uncertainty(kind)
        total = v + v_level + self.noise
        surprise = max(-OUTLIER, min(OUTLIER, y - self.level - known.offset))
        self.level += v_level / total * surprise
        known.offset += v / total * surprise
        known.var, known.at = v - v * v / total, self.passes
        self.noise += (max(surprise ** 2 - v - v_level, 0.0) - self.noise) / NOISE_MEMORY
        self.noise = max(self.noise, NOISE_FLOOR)

    def observe_switch(self, rows: int, seconds: float) -> None:
        """A target pass of ``rows`` rows right after a pass of another shape (fewer than SETTLED in a row)."""
        settled = self.kinds.get(rows)
        if settled is None or not seconds > 0:
            return
        extra = max(-OUTLIER, min(OUTLIER, math.log(seconds) - self.level - settled.offset))
        self.switches = min(self.switches + 1, NOISE_MEMORY)
        self.switch += (extra - self.switch) / self.switches

    # -- costs ---------------------------------------------------------------

    def known(self, kind) -> bool:
        return kind in self.kinds

    def judged(self, kind) -> bool:
        """Whether decoding has timed ``kind`` (not only the warm-up)."""
        return kind in self.kinds and not self.kinds[kind].warm

    def uncertainty(self, kind, spread: float = 1.0) -> float:
        """The variance of ``kind``'s offset (times ``spread`` squared): what its timings left, its staleness, and
        the warm-up's doubt."""
        k = self.kinds[kind]
        drift = self.noise / NOISE_MEMORY ** 2 * (self.passes - k.at)
        return spread ** 2 * (k.var + drift) + (self.doubt if k.warm else 0.0)

    def prices(self, cap: int, rng: np.random.Generator | None = None, spread: float = 1.0) -> "Prices":
        """The costs of every pass up to ``cap`` drafts, relative to the level: the estimates, or (``rng``) one
        draw from their uncertainty, its sd times ``spread`` (the row curve's weights use that sd too, so a narrowed
        draw leans on the timed counts more than the estimates' curve does; the warm-up's doubt is not narrowed). A
        draft step not timed costs what a first step does."""
        draw = rng if spread > 0 else None

        def cost(kind) -> float | None:
            k = self.kinds.get(kind)
            if k is None:
                return None
            z = math.sqrt(self.uncertainty(kind, spread)) * draw.standard_normal() if draw is not None else 0.0
            return math.exp(k.offset + z)

        multi = {r: k for r, k in self.kinds.items() if isinstance(r, int) and r >= 2}
        rows: dict[int, float] = {}
        if len(multi) >= 2:
            span = range(2, max(cap + 1, max(multi)) + 1)
            values = {r: math.exp(k.offset) for r, k in multi.items()}
            # a timing's variance in seconds (relative to the level) and each count's timings, staleness counted
            typical = sum(values.values()) / len(values)
            weights = {r: self.noise / self.uncertainty(r, spread) for r in multi}
            rows = curve(values, weights, span, self.noise * typical ** 2, draw)
        elif multi:
            (r, k), = multi.items()
            rows = {r: math.exp(k.offset)}
        step = cost(STEP)
        first = cost(FIRST) or step
        step = step or first
        return Prices(cost(1), rows, step, first, cost(CATCH_UP) or self.prefill * (step or 0.0), math.exp(self.switch))

    def seconds(self, kind) -> float | None:
        """What a timing of ``kind`` costs now (None where it was never timed)."""
        k = self.kinds.get(kind)
        return None if k is None else math.exp(self.level + k.offset)


@dataclass(frozen=True)
class Prices:
    """Costs relative to the machine's level: what the choice compares."""

    one_row: float | None
    rows: dict[int, float]  # 2 rows up to cap + 1 or the widest timed (one multi-row count timed: only it)
    step: float | None
    first: float | None
    catch_up: float  # per token
    switch: float  # a pass after another shape, times a settled one

    def verify(self, rows: int) -> float:
        if rows == 1 or not self.rows:
            return self.one_row or 0.0
        if rows in self.rows:
            return max(self.rows[rows], self.one_row or 0.0)
        nearest = min(self.rows, key=lambda r: abs(r - rows))  # one multi-row count timed: flat from it
        return self.rows[nearest]

    def drafts(self, k: int) -> float:
        """k draft steps, the first priced apart (after a pass that kept all its drafts it evaluates two tokens)."""
        if k == 0 or self.step is None:
            return 0.0
        return self.first + (k - 1) * self.step

    def pass_cost(self, k: int) -> float:
        return self.drafts(k) + self.verify(k + 1)
