"""Ad hoc (2026-12-04): where the FALLING case's shortfall comes from. Fresh processes as
tests/test_policy_sim.py runs them (seeds 2 and 3), the policy told the true costs (mode c), the true
acceptance by position (a), both (ca), or neither (x); prints the ratio to the best fixed k and the k
chosen. Run from the repository root at the policy before the multi-row curve (2d0bb52):
    PYTHONPATH=<2d0bb52 worktree> python benchmarks/runs/row-curve-2026-12-04/decompose.py x   (c, a, ca)
"""

import collections
import sys

import numpy as np

sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

from specllama.adaptive import DraftLengthPolicy as P  # noqa: E402

acc, mode = S.FALLING, sys.argv[1]
if "c" in mode:  # told the true costs
    P.verify_cost = lambda self, rows: S.DEMO.verify(rows)
    P.draft_cost = lambda self, k: 0.0 if k == 0 else S.DEMO.draft_step * k
if "a" in mode:  # told the true acceptance by position
    P.acceptances = lambda self, k: list(acc[:k])
hist = collections.Counter()
choose = P.choose


def counted(self, cap, *a, **kw):
    k = choose(self, cap, *a, **kw)
    hist[k] += 1
    return k


P.choose = counted
out = []
kb, best = S.best_fixed(S.DEMO, acc, seed=1)
for seed in (2, 3):
    rng = np.random.default_rng(seed)
    res = [S.Run(S.DEMO, rng, agree=S.mean_rate(acc)).call(S.constant(acc)) for _ in range(S.RUNS)]
    out.append(round(S.tps(res) / best, 4))
print(mode, out, "best fixed k", kb, "k chosen", sorted(hist.items()))
