"""Ad hoc (2026-12-04): acceptance 0.8 on the demo pair's measured row costs (DEMO_MEASURED), 108
fresh processes at the tests' seed: the expected speed of each fixed k, the ratio to the best fixed k,
the share of passes that drafted (and by tens of passes, the first 40), then the ratio with one of the
policy's constants changed at a time. Run from the repository root:
    python benchmarks/runs/row-curve-2026-12-04/measured_08.py
"""

import collections
import sys

import numpy as np

sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

from specllama import adaptive  # noqa: E402

M, ACCEPT = S.DEMO_MEASURED, 0.8
print("tokens/s by fixed k:", [round(M.expected_rate(k, ACCEPT), 2) for k in range(9)])
early = collections.Counter()
choose = adaptive.DraftLengthPolicy.choose


def counted(self, cap, *a, **kw):
    k = choose(self, cap, *a, **kw)
    if self.passes <= 40:
        early[((self.passes - 1) // 10, k > 0)] += 1
    return k


adaptive.DraftLengthPolicy.choose = counted
rng = np.random.default_rng(2)
runs = [S.Run(M, rng, agree=ACCEPT) for _ in range(S.RUNS)]
ours = S.tps([r.call(S.constant(ACCEPT)) for r in runs])
_, best = S.best_fixed(M, ACCEPT, seed=1)
drafting, passes = sum(r.drafting_passes for r in runs), sum(r.passes for r in runs)
print(f"ratio {ours / best:.4f}; drafting in {drafting} of {passes} passes ({drafting / passes:.1%})")
for tens in range(4):
    d, t = early[(tens, True)], early[(tens, True)] + early[(tens, False)]
    print(f"  passes {10 * tens + 1}-{10 * tens + 10}: drafting in {d} of {t}")
adaptive.DraftLengthPolicy.choose = choose
for name, value in (("MIN_EVIDENCE", 0), ("FALLBACK_OPTIMISM", 0.0), ("UNTRIED_OPTIMISM", 0.0)):
    kept = getattr(adaptive, name)
    setattr(adaptive, name, value)
    print(f"{name} = {value}: {S.fresh_ratio(ACCEPT, machine=M)[0]:.4f}")
    setattr(adaptive, name, kept)
