"""Ad hoc (2026-12-04): the FALLING case (108 fresh processes, the tests' seed) with one of the
policy's constants changed at a time. Run from the repository root at the policy before the curve:
    PYTHONPATH=<2d0bb52 worktree> python benchmarks/runs/row-curve-2026-12-04/knobs.py
"""

import sys

sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

from specllama import adaptive  # noqa: E402

print(adaptive.__file__)
for name, value in (("VERIFY_WINDOW", 16), ("VERIFY_WINDOW", 32), ("TIE", 0.0), ("UNTRIED_OPTIMISM", 0.0)):
    kept = getattr(adaptive, name)
    setattr(adaptive, name, value)
    print(f"{name} = {value}: {S.fresh_ratio(S.FALLING)[0]:.4f}")
    setattr(adaptive, name, kept)
