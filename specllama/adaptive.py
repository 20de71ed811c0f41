"""How many tokens to draft next: the k that maximises expected tokens per
second, from online estimates of what this machine and this pair cost.

With a_i the chance that draft position i is accepted once positions before
it were (estimated per position), the expected tokens of one pass with k
drafts are (Leviathan et al. 2023, with position-dependent rates)

    E(k) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{k-1},

and the pass costs k * t_draft + t_verify(k + 1 rows). The policy picks
argmax_k E(k) / cost(k) over 0..cap; k = 0 is plain target-only decoding,
so when drafting cannot pay (a draft step as dear as a target step) it
falls back to it, and looks again now and then.

Exactness: k is fixed before any draft token of the pass is drawn, from
past passes only, so it cannot bias the tokens (see engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIOR_ACCEPT = 0.7  # acceptance assumed before anything is observed
PRIOR_WEIGHT = 1.0  # a position's estimate leans on the pooled rate with this weight
DECAY = 0.97  # at each new observation of a position, older ones fade
PRIOR_ROW_SLOPE = 0.1  # each extra verify row costs this share of one row, until measured
START_K = 4  # the first pass, before anything is measured
EXPLORE_EVERY = 16  # passes between probes of a neighbouring k
MAX_PROBE_GAP = 1024  # after a fallback to k = 0, probes come ever rarer, up to this
COST_EMA = 0.2  # weight of a new timing in a cost estimate


def expected_tokens(accept: list[float], k: int) -> float:
    """E(k) = sum_{j=0..k} prod_{i<j} a_i."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= accept[i]
        total += run
    return total


@dataclass
class DraftLengthPolicy:
    """Online estimates and the choice they imply. One per engine, kept
    across generations (costs do not change between prompts)."""

    accepted: list[float] = field(default_factory=list)  # decayed counts, by position
    tried: list[float] = field(default_factory=list)
    draft_seconds: float | None = None  # one draft step
    verify_seconds: dict[int, float] = field(default_factory=dict)  # rows -> one pass
    passes: int = 0
    # While drafting does not pay, the draft model falls behind (it evaluates
    # nothing) and a probe must first catch up: probe after 16, 32, 64, ...
    probe_gap: int = EXPLORE_EVERY
    since_probe: int = 0

    # -- estimates --------------------------------------------------------

    def pooled(self) -> float:
        """Acceptance over all positions observed (the prior before any)."""
        tried = sum(self.tried)
        return (sum(self.accepted) + PRIOR_ACCEPT * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)

    def acceptance(self, i: int) -> float:
        """Estimated P(accept position i | positions before it accepted): its
        own decayed record, leaning on the pooled rate where it is thin (a
        position never tried gets the pooled rate)."""
        return self._acceptance(i, self.pooled())

    def _acceptance(self, i: int, pooled: float) -> float:
        acc = self.accepted[i] if i < len(self.accepted) else 0.0
        tried = self.tried[i] if i < len(self.tried) else 0.0
        return (acc + pooled * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)

    def verify_cost(self, rows: int) -> float:
        """Seconds for a target pass of ``rows`` rows: a line through the
        measured points (a prior slope while only one row count is known)."""
        pts = sorted(self.verify_seconds.items())
        if len(pts) == 1:
            (n0, t0), = pts
            one = t0 / (1.0 + PRIOR_ROW_SLOPE * (n0 - 1))
            return one * (1.0 + PRIOR_ROW_SLOPE * (rows - 1))
        n_mean = sum(n for n, _ in pts) / len(pts)
        t_mean = sum(t for _, t in pts) / len(pts)
        slope = sum((n - n_mean) * (t - t_mean) for n, t in pts) / sum((n - n_mean) ** 2 for n, _ in pts)
        return max(t_mean + max(slope, 0.0) * (rows - n_mean), 1e-9)

    def rate(self, k: int) -> float:
        """Expected tokens per second with k drafts."""
        pooled = self.pooled()
        accept = [self._acceptance(i, pooled) for i in range(k)]
        cost = k * (self.draft_seconds or 0.0) + self.verify_cost(k + 1)
        return expected_tokens(accept, k) / cost

    # -- the choice -------------------------------------------------------

    def choose(self, cap: int, *, minimum: int = 0) -> int:
        """The number of tokens to draft in the next pass (minimum..cap;
        a cap below the minimum wins)."""
        return max(self._choose(cap), min(minimum, cap))

    def _choose(self, cap: int) -> int:
        if cap <= 0:
            return 0
        if self.draft_seconds is None or not self.verify_seconds:
            return min(cap, START_K)
        rates = [self.rate(k) for k in range(cap + 1)]
        best = max(range(cap + 1), key=rates.__getitem__)
        self.passes += 1
        self.since_probe += 1
        if best == 0:
            if self.since_probe >= self.probe_gap:
                # Try drafting again, at the best k >= 1: the estimates may be stale.
                self.since_probe = 0
                self.probe_gap = min(2 * self.probe_gap, MAX_PROBE_GAP)
                best = max(range(1, cap + 1), key=rates.__getitem__)
        else:
            self.probe_gap = EXPLORE_EVERY
            if self.since_probe >= EXPLORE_EVERY:
                # Probe a neighbour now and then, so the estimates stay fresh
                # around the choice.
                self.since_probe = 0
                best = min(best + 1, cap) if (self.passes // EXPLORE_EVERY) % 2 else best - 1
        return best

    def observe(self, n_drafted: int, n_accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        """Learn from one finished pass.

        Args:
            n_drafted, n_accepted: the pass's draft length and how much was kept.
            draft_seconds: time spent drafting (catching up excluded).
            verify_seconds: time of the target pass and the acceptance walk.
        """
        # Positions 0..n_accepted were tried (the last of them rejected unless
        # all passed); a position's record fades only when it is observed
        # again, so passes without drafts leave the estimates alone.
        for i in range(min(n_accepted + 1, n_drafted)):
            while len(self.tried) <= i:
                self.tried.append(0.0)
                self.accepted.append(0.0)
            self.tried[i] = self.tried[i] * DECAY + 1.0
            self.accepted[i] = self.accepted[i] * DECAY + (1.0 if i < n_accepted else 0.0)
        if n_drafted:
            per_step = draft_seconds / n_drafted
            self.draft_seconds = _ema(self.draft_seconds, per_step)
        rows = n_drafted + 1
        self.verify_seconds[rows] = _ema(self.verify_seconds.get(rows), verify_seconds)


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1.0 - COST_EMA) * old + COST_EMA * new
