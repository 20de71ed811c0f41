"""Ad hoc (2026-12-04): the policy's verify-cost estimates against the simulated demo machine's
true costs at every choice, by row count (mean relative error and its spread), in the FALLING case's
108 fresh processes (seed 2). Run from the repository root (at 2d0bb52 for the figures before the curve):
    python benchmarks/runs/row-curve-2026-12-04/cost_errors.py
"""

import collections
import sys

import numpy as np

sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

from specllama.adaptive import DraftLengthPolicy as P  # noqa: E402

err = collections.defaultdict(list)
choose = P.choose


def recorded(self, cap, *a, **kw):
    if self.passes > 0:
        for r in range(1, 10):
            err[r].append(self.verify_cost(r) / S.DEMO.verify(r) - 1)
    return choose(self, cap, *a, **kw)


P.choose = recorded
rng = np.random.default_rng(2)
for _ in range(S.RUNS):
    S.Run(S.DEMO, rng, agree=S.mean_rate(S.FALLING)).call(S.constant(S.FALLING))
for r in range(1, 10):
    e = np.array(err[r])
    print(f"{r} rows: mean error {e.mean():+.3f}, sd {e.std():.3f}")
