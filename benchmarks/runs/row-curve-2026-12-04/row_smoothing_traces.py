"""Ad hoc (2026-12-04): the real-trace replays (median, 10th percentile, mean, A/A 10th percentile)
and the FALLING case on the demo machine (seed 2) and on the measured one (seeds 2-5) with
adaptive.ROW_SMOOTHING set to the argument. Run from the repository root:
    python benchmarks/runs/row-curve-2026-12-04/row_smoothing_traces.py 50
"""

import sys

import numpy as np

from specllama import adaptive

adaptive.ROW_SMOOTHING = float(sys.argv[1])
sys.path.insert(0, "tests")
import test_policy_sim as S  # noqa: E402

for kind in ("greedy", "sampled"):
    ours, control = S.trace_ratios(kind)
    print(f"{sys.argv[1]} {kind}: median {np.median(ours):.4f} p10 {np.percentile(ours, 10):.4f} "
          f"mean {np.mean(ours):.4f}; A/A p10 {np.percentile(control, 10):.4f}")
print(sys.argv[1], "falling", round(S.fresh_ratio(S.FALLING)[0], 4))
print(sys.argv[1], "measured falling",
      [round(S.fresh_ratio(S.FALLING, seed=seed, machine=S.DEMO_MEASURED)[0], 4) for seed in (2, 3, 4, 5)])
