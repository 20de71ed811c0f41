"""Ad hoc (2026-12-04): fresh processes on the demo pair's measured row costs (DEMO_MEASURED) at acceptance 0.95 and
0.98, over seeds 2-7 (the tests' seed first): how far CONFIRM moved them against the seeds' own spread.

    python benchmarks/runs/confirm-2026-12-04/seeds_case.py            # the checkout's policy
    python benchmarks/runs/confirm-2026-12-04/seeds_case.py 3343db7    # specllama/adaptive.py at a commit
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from policy_sim import simulator  # noqa: E402

commit = sys.argv[1] if len(sys.argv) > 1 else None
sim = simulator(commit)

for accept in (0.95, 0.98):
    ratios = [sim.fresh_ratio(accept, seed, machine=sim.DEMO_MEASURED)[0] for seed in range(2, 8)]
    print(f"{commit or 'checkout'}: DEMO_MEASURED, acceptance {accept}, seeds 2-7: "
          f"{' '.join(f'{r:.4f}' for r in ratios)}; mean {np.mean(ratios):.4f}", flush=True)
