"""Ad hoc (2026-12-04): the coder pair's costs with the 1-row passes alone 1.6x dearer for 3, 6, 12 and 24 passes
in each hundred (tests/test_policy_sim.py's busy_moments_run(one_row_only=True)): tokens per second over
target-only's under the same moments, drafting passes, passes, rechecks (108 fresh processes each).

    python benchmarks/runs/confirm-2026-12-04/one_row_moments.py            # the checkout's policy
    python benchmarks/runs/confirm-2026-12-04/one_row_moments.py 3343db7    # specllama/adaptive.py at a commit
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from policy_sim import simulator  # noqa: E402

commit = sys.argv[1] if len(sys.argv) > 1 else None
sim = simulator(commit)

for length in (3, 6, 12, 24):
    ratio, drafting, passes, rechecks = sim.busy_moments_run(length, one_row_only=True)
    print(f"{commit or 'checkout'}: 1-row passes 1.6x for {length} passes in each hundred: {ratio:.4f} of "
          f"target-only, drafting in {drafting} of {passes} passes, rechecks {rechecks}", flush=True)
