"""Ad hoc (2026-12-04): the drift case of tests/test_policy_sim.py (a long-lived process whose machine
gets calmer, acceptance 0.5) at seeds 11-14, with ONE_ROW_AGE (bounded) or without it (unbounded).
Run from the repository root:
    python benchmarks/runs/row-curve-2026-12-04/drift_gain.py bounded   (or unbounded)
"""

import sys

sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

from specllama import adaptive  # noqa: E402

if sys.argv[1] == "unbounded":
    adaptive.ONE_ROW_AGE = 10**9
print(sys.argv[1], [round(S.drift_ratio(0.5, seed=seed), 4) for seed in (11, 12, 13, 14)])
