"""How many tokens to draft next: the k that maximises expected tokens per
second, from online estimates of what this machine and this pair cost.

With a_i the chance that draft position i is accepted once positions before
it were (estimated per position), the expected tokens of one pass with k
drafts are (Leviathan et al. 2023, with position-dependent rates)

    E(k) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{k-1},

and the pass costs k * t_draft + t_verify(k + 1 rows). The policy picks
argmax_k E(k) / cost(k) over minimum..cap; k = 0 is plain target-only
decoding, so when drafting cannot pay (a draft step as dear as a target
step) it falls back to it, and looks again now and then.

Costs are the fastest of the recent timings of each kind (a draft step; a
verify pass of each row count): timings only err upward, so a cold first
pass or a hiccup of the machine does not steer the choice; row counts timed too rarely are
estimated from their neighbours, optimistically, so they get measured. :meth:`DraftLengthPolicy.seed` starts a policy
from timings measured at load time or saved by an earlier process.

Exactness: k is fixed before any draft token of the pass is drawn, from
past passes only, so it cannot bias the tokens (see engine.py).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

DEFAULT_DRAFT_MAX = 8  # the cap of the adaptive draft length (--draft-max)
PRIOR_ACCEPT = 0.7  # acceptance assumed before anything is observed
PRIOR_WEIGHT = 4.0  # a position's estimate leans on the pooled rate with this weight
DECAY = 0.97  # at each new observation of a position, older ones fade
PRIOR_ROW_SLOPE = 0.1  # each extra verify row costs this share of one row, until measured
START_K = 4  # the first pass, before any cost is known
EXPLORE_EVERY = 16  # passes between probes of a neighbouring k
MAX_PROBE_GAP = 1024  # after a fallback to k = 0, probes come ever rarer, up to this
MIN_EVIDENCE = 8  # drafting passes observed before the policy may give drafting up
DRAFT_WINDOW = 32  # recent draft steps whose fastest is the draft cost
VERIFY_WINDOW = 8  # recent passes of one row count whose fastest is its cost
TRUSTED = 3  # timings of a row count before its own are trusted over its neighbours' estimate
SAVED_WEIGHT = 4.0  # a saved acceptance record counts as this many passes


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
    draft_steps: deque = field(default_factory=lambda: deque(maxlen=DRAFT_WINDOW))  # seconds per draft step
    verify_passes: dict[int, deque] = field(default_factory=dict)  # rows -> recent seconds per pass
    passes: int = 0
    drafting_passes: int = 0  # passes observed that drafted something
    # While drafting does not pay, the draft model falls behind (it evaluates
    # nothing) and a probe must first catch up: probe after 16, 32, 64, ...
    probe_gap: int = EXPLORE_EVERY
    since_probe: int = 0
    last_timed: dict[int, int] = field(default_factory=dict)  # rows -> the pass that last timed them

    # -- estimates --------------------------------------------------------

    @property
    def draft_seconds(self) -> float | None:
        """One draft step: the fastest of the recent ones (timings only err
        upward: cold caches, other processes); None before any."""
        return min(self.draft_steps) if self.draft_steps else None

    @property
    def verify_seconds(self) -> dict[int, float]:
        """Rows -> the fastest of the recent passes with that many rows."""
        return {rows: min(ts) for rows, ts in self.verify_passes.items() if ts}

    def pooled(self) -> float:
        """Acceptance over all positions observed (the prior before any)."""
        tried = sum(self.tried)
        return (sum(self.accepted) + PRIOR_ACCEPT * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)

    def acceptance(self, i: int) -> float:
        """Estimated P(accept position i | positions before it accepted)."""
        return self.acceptances(i + 1)[i]

    def acceptances(self, k: int) -> list[float]:
        """The estimates for positions 0..k-1: each position's own decayed
        record, leaning where it is thin on the estimate of the position
        before it (position 0 on the pooled rate). A draft that got this far
        agrees with the target, so a later position is at least as likely
        to pass as the one before until its own record says otherwise; a
        position never tried inherits its predecessor's rate."""
        out: list[float] = []
        prior = self.pooled()
        for i in range(k):
            acc = self.accepted[i] if i < len(self.accepted) else 0.0
            tried = self.tried[i] if i < len(self.tried) else 0.0
            prior = (acc + prior * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)
            out.append(prior)
        return out

    def verify_cost(self, rows: int) -> float:
        """Seconds for a target pass of ``rows`` rows.

        A row count timed at least ``TRUSTED`` times costs the fastest of its
        recent passes. Otherwise its cost is estimated from the other row
        counts (interpolated between the nearest timed ones, extrapolated
        with a robust slope), and a row count timed once or twice takes the
        lower of its own timings and that estimate: a cost timed cold looks
        no dearer than its neighbours say, so the policy tries it and
        measures it again instead of avoiding it forever.
        """
        own = self.verify_passes.get(rows)
        if own and len(own) >= TRUSTED:
            return min(own)
        estimate = self._estimate(rows)
        if own:
            return min(min(own), estimate) if estimate is not None else min(own)
        return estimate if estimate is not None else 0.0

    def _estimate(self, rows: int) -> float | None:
        """A pass of ``rows`` rows from the other row counts' costs."""
        pts = sorted((n, t) for n, t in self.verify_seconds.items() if n != rows)
        if not pts:
            return None
        below = [(n, t) for n, t in pts if n < rows]
        above = [(n, t) for n, t in pts if n > rows]
        if below and above:  # between two timed row counts: a straight line
            (n0, t0), (n1, t1) = below[-1], above[0]
            return t0 + (t1 - t0) * (rows - n0) / (n1 - n0)
        if len(pts) == 1 or not below:
            # one point, or below every timed count: the prior's shape through the nearest one
            n0, t0 = pts[0] if not below else pts[-1]
            one = t0 / (1.0 + PRIOR_ROW_SLOPE * (n0 - 1))
            return one * (1.0 + PRIOR_ROW_SLOPE * (rows - 1))
        # above every timed count: the last one plus a robust (Theil-Sen) slope
        slopes = [(tj - ti) / (nj - ni) for i, (ni, ti) in enumerate(pts) for nj, tj in pts[i + 1:]]
        n_hi, t_hi = pts[-1]
        return t_hi + max(statistics.median(slopes), 0.0) * (rows - n_hi)

    def rate(self, k: int) -> float:
        """Expected tokens per second with k drafts."""
        cost = k * (self.draft_seconds or 0.0) + self.verify_cost(k + 1)
        return expected_tokens(self.acceptances(k), k) / cost

    # -- the choice -------------------------------------------------------

    def choose(self, cap: int, *, minimum: int = 0) -> int:
        """The number of tokens to draft in the next pass (minimum..cap;
        a cap below the minimum wins)."""
        return max(self._choose(cap), min(minimum, cap))

    def _choose(self, cap: int) -> int:
        if cap <= 0:
            return 0
        if self.draft_seconds is None or not self.verify_passes:
            return min(cap, START_K)
        rates = [self.rate(k) for k in range(cap + 1)]
        best = max(range(cap + 1), key=rates.__getitem__)
        self.passes += 1
        self.since_probe += 1
        if best == 0 and self.drafting_passes < MIN_EVIDENCE:
            # too little evidence to give drafting up: keep measuring at the best k >= 1
            best = max(range(1, cap + 1), key=rates.__getitem__)
        elif best == 0:
            if self.since_probe >= self.probe_gap:
                # Try drafting again, at the best k >= 1: the estimates may be stale.
                self.since_probe = 0
                self.probe_gap = min(2 * self.probe_gap, MAX_PROBE_GAP)
                best = max(range(1, cap + 1), key=rates.__getitem__)
        else:
            self.probe_gap = EXPLORE_EVERY
            if self.since_probe >= EXPLORE_EVERY:
                # Probe now and then, so the estimates stay fresh: a neighbour
                # of the choice (above, below), or the draft length timed
                # longest ago (a cost measured once, cold, must not stick).
                self.since_probe = 0
                turn = (self.passes // EXPLORE_EVERY) % 3
                if turn == 0:
                    best = min(best + 1, cap)
                elif turn == 1:
                    best = best - 1
                else:
                    best = min(range(1, cap + 1), key=lambda k: self.last_timed.get(k + 1, -1))
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
            self.drafting_passes += 1
            self.draft_steps.append(draft_seconds / n_drafted)
        self.observe_verify(n_drafted + 1, verify_seconds)

    def observe_verify(self, rows: int, seconds: float) -> None:
        """One target pass of ``rows`` rows took ``seconds``."""
        self.verify_passes.setdefault(rows, deque(maxlen=VERIFY_WINDOW)).append(seconds)
        self.last_timed[rows] = self.passes

    # -- carried between processes ----------------------------------------

    def snapshot(self) -> dict:
        """What a later process may start from: the costs and the
        acceptance record (scaled to weigh as ``SAVED_WEIGHT`` passes)."""
        tried = max(self.tried, default=0.0)
        scale = min(1.0, SAVED_WEIGHT / tried) if tried else 0.0
        return {
            "draft_seconds": self.draft_seconds,
            "verify_seconds": {str(rows): t for rows, t in self.verify_seconds.items()},
            "tried": [t * scale for t in self.tried],
            "accepted": [a * scale for a in self.accepted],
        }

    def seed(self, saved: dict) -> None:
        """Start from timings and acceptance measured before (a
        :meth:`snapshot`, or load-time timings): each saved cost counts as
        one observation, so real passes soon outweigh it."""
        draft = saved.get("draft_seconds")
        if isinstance(draft, (int, float)) and draft > 0 and not self.draft_steps:
            self.draft_steps.append(float(draft))
        for rows, t in (saved.get("verify_seconds") or {}).items():
            if isinstance(t, (int, float)) and t > 0 and int(rows) not in self.verify_passes:
                self.observe_verify(int(rows), float(t))
        tried, accepted = saved.get("tried") or [], saved.get("accepted") or []
        if not self.tried and len(tried) == len(accepted):
            self.tried = [float(t) for t in tried]
            self.accepted = [float(a) for a in accepted]
