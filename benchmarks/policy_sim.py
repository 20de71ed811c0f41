"""Every figure of the draft-length policy's timing-free tests at once
(tests/test_policy_sim.py: simulated costs with +-20% noise; Bernoulli
acceptance, and the demo pairs' real acceptance traces), each a ratio of the
best fixed draft length's tokens per second, as the tests compute them.

``--policy-from COMMIT`` runs the same simulations with
``specllama/adaptive.py`` as it was at that commit (what a change moved);
``--set NAME=VALUE`` changes one of its constants first.

    python benchmarks/policy_sim.py
    python benchmarks/policy_sim.py --policy-from 250990e
    python benchmarks/policy_sim.py --set TIE=0.02
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def policy_module(commit: str | None) -> types.ModuleType:
    """specllama.adaptive, as checked out or as it was at ``commit``."""
    if commit is None:
        return importlib.import_module("specllama.adaptive")
    importlib.import_module("specllama")
    shown = subprocess.run(["git", "show", f"{commit}:specllama/adaptive.py"], cwd=ROOT, capture_output=True,
                           text=True)
    if shown.returncode:
        sys.exit(f"--policy-from {commit}: {shown.stderr.strip()}")
    module = types.ModuleType("specllama.adaptive")
    module.__file__ = f"{commit}:specllama/adaptive.py"
    sys.modules["specllama.adaptive"] = module  # before the tests import it
    exec(compile(shown.stdout, module.__file__, "exec"), module.__dict__)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy-from", metavar="COMMIT", help="specllama/adaptive.py as at this commit")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a constant of specllama.adaptive to change first")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    adaptive = policy_module(args.policy_from)
    for item in args.set:
        name, _, value = item.partition("=")
        if not hasattr(adaptive, name):
            sys.exit(f"--set: specllama.adaptive has no constant {name!r}")
        setattr(adaptive, name, type(getattr(adaptive, name))(value))
    from tests import test_policy_sim as sim

    ratios = {f"fresh, acceptance {a}": sim.fresh_ratio(a) for a in (0.5, 0.8, 0.95, 0.98)}
    for accept, early in ((0.8, 0), (0.8, 6), (0.95, 0), (0.95, 6)):
        ratios[f"long-lived, acceptance {accept}, first {early} passes rejected"] = sim.long_lived_ratio(accept, early)
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.4f}")
    print(f"mean of the {len(ratios)} Bernoulli cases: {np.mean(list(ratios.values())):.4f}")
    ours, control = sim.trace_ratios()
    print(f"real traces ({len(ours)} replays): median {np.median(ours):.4f}, 10th percentile "
          f"{np.percentile(ours, 10):.4f}, mean {np.mean(ours):.4f}; A/A control median "
          f"{np.median(control):.4f}, 10th percentile {np.percentile(control, 10):.4f}")


if __name__ == "__main__":
    main()
