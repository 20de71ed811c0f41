"""How likely a draft token is kept, by its position in the draft.

a_i is the chance that draft position i is kept once the positions before it
were. Each position keeps a discounted record (``MEMORY`` passes of any
kind; the parallel slots': their shared drafting passes), and its estimate
leans on the rate pooled over all positions with ``LEAN_WEIGHT``: a
position's own record departs from the pooled rate only as it grows, and a
position not tried yet is the pooled rate (rejections fall at
hard tokens of the text, whatever position they land on, so one rejection at
position 3 says little about position 3). The pooled rate
starts from a prior: ``PRIOR_ACCEPT``, or the warm-up's agreement check (the
draft writes a short text greedily, the target checks it), whose tokens weigh
as observed positions. The choice (:mod:`.adaptive`) reads the posterior at five points
(:meth:`AcceptanceModel.spread`) and prices what a pass would tell of it
(:meth:`AcceptanceModel.outcomes`, :func:`worth`), both in one computation
(:meth:`AcceptanceModel.around`);
:meth:`AcceptanceModel.sample` draws from the posterior (the parallel slots'
choice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .protocol import MEMORY

# acceptance assumed before any is seen (the demo pairs keep 93-95%): higher drafts sooner on a pair not yet tried
PRIOR_ACCEPT = 0.85
# positions that prior (or a remembered record) weighs: heavier starts surer, and follows the text in front slower
PRIOR_WEIGHT = 4.0
# positions the pooled rate weighs in each position's estimate: heavier pools more, and tells positions apart later
LEAN_WEIGHT = 16.0
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(5)  # (a standard normal's expectation, by quadrature)
WEIGHTS = WEIGHTS / WEIGHTS.sum()


@dataclass
class AcceptanceModel:
    accepted: list[float] = field(default_factory=list)  # discounted counts, by position
    tried: list[float] = field(default_factory=list)
    prior_accept: float = PRIOR_ACCEPT
    prior_weight: float = PRIOR_WEIGHT

    def fade(self) -> None:
        """A pass went by (drafting or not): every record fades, so that a verdict on an older stretch of text,
        also one that ended drafting, is forgotten in time."""
        fade = 1 - 1 / MEMORY
        self.tried = [t * fade for t in self.tried]
        self.accepted = [a * fade for a in self.accepted]

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """A pass drafted ``n_drafted`` and kept ``n_accepted``: positions
        0..n_accepted were tried (the last rejected unless all were kept)."""
        for i in range(min(n_accepted + 1, n_drafted)):
            if i == len(self.tried):
                self.tried.append(0.0)
                self.accepted.append(0.0)
            self.tried[i] += 1.0
            self.accepted[i] += 1.0 if i < n_accepted else 0.0

    def observe_agreement(self, agreed: int, n: int) -> None:
        """The warm-up's check: ``agreed`` of ``n`` greedy draft tokens were the
        target's greedy choice too. They weigh as ``n`` observed positions."""
        if n > 0:
            self.prior_accept = (agreed + PRIOR_ACCEPT * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
            self.prior_weight = PRIOR_WEIGHT + n

    def _record(self, i: int) -> tuple[float, float]:
        return (self.accepted[i], self.tried[i]) if i < len(self.tried) else (0.0, 0.0)

    def pooled(self) -> tuple[float, float]:
        """The rate over all positions, and the positions it weighs (the prior's included)."""
        weight = sum(self.tried) + self.prior_weight
        return (sum(self.accepted) + self.prior_accept * self.prior_weight) / weight, weight

    def leans(self, k: int) -> list[float]:
        """The share of each of a_0..a_{k-1}'s estimate that is the pooled rate."""
        return [LEAN_WEIGHT / (self._record(i)[1] + LEAN_WEIGHT) for i in range(k)]

    def means(self, k: int) -> list[float]:
        """The estimates of a_0..a_{k-1}."""
        pooled = self.pooled()[0]
        return [(acc + pooled * LEAN_WEIGHT) / (tried + LEAN_WEIGHT) for acc, tried in map(self._record, range(k))]

    def news(self, positions: np.ndarray) -> np.ndarray:
        """How far a pass that tries ``positions`` more positions may move the pooled rate: the sd of its estimate
        after that pass, as seen before it (of a Beta posterior of weight w: its variance times n / (w + n))."""
        rate, weight = self.pooled()
        return np.sqrt(rate * (1 - rate) / (weight + 1) * positions / (weight + positions))

    def spread(self, accept: np.ndarray) -> np.ndarray:
        """The posterior around the estimates ``accept`` (a_0..a_{cap-1}) at :data:`NODES`: the pooled rate moved
        by each node times its sd, each position by its lean share; len(NODES) rows (their expectation, with
        :data:`WEIGHTS`: the estimates)."""
        return self._moved(accept, self._spread_shifts())

    def outcomes(self, accept: np.ndarray) -> np.ndarray:
        """Where a pass of k = 1..cap drafts may leave the estimates ``accept`` (a_0..a_{cap-1}): for each k in turn,
        the pooled rate moved by each of :data:`NODES` times :meth:`news` of the positions that pass tries
        (1 + a_0 + a_0 a_1 + ...), each position by its lean share; cap x len(NODES) rows."""
        return self._moved(accept, self._outcome_shifts(accept))

    def around(self, accept: np.ndarray) -> np.ndarray:
        """What the choice reads, a row each: :meth:`spread`'s points, the estimates ``accept``, :meth:`outcomes`
        (in one computation)."""
        moved = self._moved(accept, np.concatenate([self._spread_shifts(), self._outcome_shifts(accept)]))
        return np.vstack([moved[:len(NODES)], accept, moved[len(NODES):]])

    def _spread_shifts(self) -> np.ndarray:
        rate, weight = self.pooled()
        return math.sqrt(rate * (1 - rate) / (weight + 1)) * NODES

    def _outcome_shifts(self, accept: np.ndarray) -> np.ndarray:
        tried = np.cumsum(np.concatenate([[1.0], np.cumprod(accept)[:-1]]))
        return (self.news(tried)[:, None] * NODES[None, :]).ravel()

    def _moved(self, accept: np.ndarray, shifts: np.ndarray) -> np.ndarray:
        """The estimates ``accept`` with the pooled rate moved by each of ``shifts`` (a row each), each position by
        its lean share."""
        return np.clip(accept[None, :] + shifts[:, None] * np.array(self.leans(len(accept)))[None, :], 1e-6, 1 - 1e-6)

    def sample(self, k: int, rng: np.random.Generator, sharpen: float = 1.0) -> list[float]:
        """One draw of a_0..a_{k-1} from the posterior: the pooled rate, then
        each position given it (``sharpen``: every count weighs this many
        times, a narrower posterior)."""
        rate, weight = self.pooled()
        pooled = rng.beta(sharpen * rate * weight + 1e-9, sharpen * (1 - rate) * weight + 1e-9)
        return [float(rng.beta(sharpen * (acc + pooled * LEAN_WEIGHT) + 1e-9,
                               sharpen * (tried - acc + (1 - pooled) * LEAN_WEIGHT) + 1e-9))
                for acc, tried in map(self._record, range(k))]

    def snapshot(self, weight: float) -> dict:
        """The record scaled to weigh at most ``weight`` passes (a later process starts from it)."""
        most = max(self.tried, default=0.0)
        scale = min(1.0, weight / most) if most else 0.0
        return {"tried": [t * scale for t in self.tried], "accepted": [a * scale for a in self.accepted]}

    def seed(self, saved: dict) -> None:
        tried, accepted = saved.get("tried") or [], saved.get("accepted") or []
        if not self.tried and len(tried) == len(accepted):
            self.tried, self.accepted = [float(t) for t in tried], [float(a) for a in accepted]


def expected_tokens(accept: list[float], k: int) -> float:
    """E(k) = sum_{j=0..k} prod_{i<j} a_i: the tokens a pass with k drafts emits, in expectation."""
    return float(tokens(np.array(accept[:k], float))[0, k])


def tokens(accept: np.ndarray) -> np.ndarray:
    """E(k) for k = 0..cap (columns), for each row of rates a_0..a_{cap-1} in ``accept``."""
    a = np.atleast_2d(accept)
    emitted = np.ones((len(a), a.shape[1] + 1))
    emitted[:, 1:] += np.cumsum(np.cumprod(a, axis=1), axis=1)
    return emitted


def worth(rates: np.ndarray) -> np.ndarray:
    """What a pass of k = 0..cap drafts is worth for what it tells of acceptance, as a share of the best rate, from
    the rates of every k (columns) at the estimates (the first row) and at each of the pass's
    :meth:`~AcceptanceModel.outcomes` (the rest): how much the best choice's rate would rise, in expectation
    (five-point Gauss-Hermite quadrature), over the passes that knowledge serves (``MEMORY``, the record's own; the
    rates should spread one-off costs over as many, or over the passes left where fewer). Next to nothing where no
    outcome of the pass would change the choice (the rates' curvature alone); none for k = 0."""
    now = rates[0].max()
    gain = np.maximum(rates[1:].max(axis=1).reshape(-1, len(NODES)) @ WEIGHTS - now, 0.0)
    return (MEMORY - 1) * np.concatenate([[0.0], gain]) / now
