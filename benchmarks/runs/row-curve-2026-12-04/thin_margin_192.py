"""Ad hoc (2026-12-04): the chat pair's thin-margin case over 192 fresh processes (seeds 0-191),
its warm-up's 9-row passes timed 1.35x (busy) and as the rest (calm): median, 10th percentile and
lowest ratio to the best fixed k. The argument: a checkout (its specllama first on the path); a
second argument sets adaptive.ROW_SMOOTHING. Run from anywhere:
    python benchmarks/runs/row-curve-2026-12-04/thin_margin_192.py <checkout> [ROW_SMOOTHING]
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, sys.argv[1])
sys.path.insert(1, str(Path(__file__).resolve().parents[3] / "tests"))
from specllama import adaptive  # noqa: E402

if len(sys.argv) > 2:
    adaptive.ROW_SMOOTHING = float(sys.argv[2])
import test_policy_sim as S  # noqa: E402

print(adaptive.__file__, sys.argv[2:])
for name, warm_up in (("busy", S.CHAT_EPYC_BUSY_WARM_UP), ("calm", {})):
    ratios, _ = S.thin_margin_ratios(192, warm_up=warm_up)
    print(f"{name}: median {np.median(ratios):.4f} p10 {np.percentile(ratios, 10):.4f} lowest {min(ratios):.4f}")
