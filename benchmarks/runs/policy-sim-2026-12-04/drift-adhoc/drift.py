"""Ad-hoc (2026-12-04, kept with its outputs first.txt and age.txt; run from the repository root as
python benchmarks/runs/policy-sim-2026-12-04/drift-adhoc/drift.py [--set NAME=VALUE] [--before X --after Y]):
36 long-lived processes on the demo's costs, ten calls each, every cost --before times through the warm-up
and the first --switch-call calls, then --after times; the later calls' tokens per second over the best
fixed k's on the changed machine. tests/test_policy_sim.py's drift_ratio is the kept form of it.
first.txt: the policy at c8f2e7d (no ONE_ROW_AGE), as is and with --set ONE_ROW_WINDOW=8; age.txt: at f0e2d71
with --set ONE_ROW_AGE=256, 128, 64; every line with --processes 36 --accepts 0.5,0.8,0.95."""
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import policy_sim as ps  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--set", action="append", default=[])
ap.add_argument("--from", dest="frm")
ap.add_argument("--processes", type=int, default=12)
ap.add_argument("--accepts", default="0.5,0.8,0.95")
ap.add_argument("--before", type=float, default=1.5)
ap.add_argument("--after", type=float, default=1.0)
ap.add_argument("--switch-call", type=int, default=3)
args = ap.parse_args()
src = ps.policy_source(args.frm)
for s in args.set:
    src = ps.with_constant(src, s)
ps.load_policy(src, "x")
from tests import test_policy_sim as sim  # noqa: E402

for accept in map(float, args.accepts.split(",")):
    calls = 10
    # best fixed k on the machine after the change
    _, best = sim.best_fixed(sim.DEMO, accept, seed=6, calls=10)
    rng = np.random.default_rng(11)
    res = []
    drafting = []
    for _ in range(args.processes):
        run = sim.Run(sim.DEMO, rng, agree=accept, warm_up={r: args.before for r in sim.WARM_UP_ROWS})
        out = []
        for c in range(calls):
            run.scale = args.before if c < args.switch_call else args.after
            out.append(run.call(sim.constant(accept)))
        res += out[args.switch_call:]
        drafting.append(run.drafting_passes)
    print(f"accept {accept}: {args.before}x for {args.switch_call} calls then {args.after}x: calls after the change "
          f"{sim.tps(res)*args.after/best:.4f} of best fixed (after)")
