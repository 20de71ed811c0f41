"""The figures of the draft-length policy's timing-free tests where drafting
pays (tests/test_policy_sim.py: simulated costs with +-20% noise; Bernoulli
acceptance, and the demo pairs' real acceptance traces), each a ratio of the
best fixed draft length's tokens per second, as the tests compute them. The
fresh Bernoulli cases run on two machines: the demo's two measured points, and
the demo pair's cost measured at every row count (``DEMO_MEASURED``).

``--policy-from COMMIT`` runs the same simulations with
``specllama/adaptive.py`` as it was at that commit (what a change moved; the
policy's methods that the simulator calls must be those of today);
``--set NAME=VALUE`` rewrites one of its constants' lines first.

    python benchmarks/policy_sim.py
    python benchmarks/policy_sim.py --policy-from 250990e
    python benchmarks/policy_sim.py --set TIE=0.02

``--seeds N`` also prints each Bernoulli case over N seeds (the tests' seed
first; ``--processes`` long-lived processes each), the busy-moment cases over
N seeds, and the thin-margin case over N times its processes: how far a
figure moves with the seed alone.

``--exact-costs 1`` (or ``all``) prints the fresh Bernoulli cases alone, with
the policy told the simulated demo machine's mean cost of a 1-row pass (or of
every pass) in place of its estimates from noisy timings: an oracle no real
policy has, which shows how much of a shortfall the costs' estimation makes.

    python benchmarks/policy_sim.py --exact-costs 1
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODULE = "specllama/adaptive.py"


def policy_source(commit: str | None) -> str:
    """specllama/adaptive.py as checked out, or as it was at ``commit``."""
    if commit is None:
        return (ROOT / MODULE).read_text(encoding="utf-8")
    shown = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode:
        sys.exit(f"--policy-from {commit}: {shown.stderr.strip()}")
    return shown.stdout


def with_constant(source: str, item: str) -> str:
    """``source`` with the line ``NAME = ...`` of a module-level constant set to VALUE
    (so that defaults bound at definition time take it too)."""
    name, _, value = item.partition("=")
    line = re.compile(rf"^{re.escape(name)} = [^\n#]*", re.M)
    if not name.isupper() or not line.search(source) or not value:
        sys.exit(f"--set {item}: expected NAME=VALUE with NAME one of the constants of {MODULE}")
    return line.sub(f"{name} = {value}  ", source, count=1)


def load_policy(source: str, origin: str) -> None:
    """Import ``source`` as specllama.adaptive, before the simulator imports it."""
    import specllama  # noqa: F401  (the package first: its submodule is then replaced)

    module = types.ModuleType("specllama.adaptive")
    module.__file__ = origin
    sys.modules["specllama.adaptive"] = module  # dataclasses look their module up while it executes
    exec(compile(source, origin, "exec"), module.__dict__)


def simulator(commit: str | None = None, sets: tuple[str, ...] = ()) -> types.ModuleType:
    """tests/test_policy_sim.py on specllama/adaptive.py as checked out (or as at ``commit``), each of ``sets``
    (NAME=VALUE) rewriting one of its constants first."""
    source = policy_source(commit)
    for item in sets:
        source = with_constant(source, item)
    sys.path.insert(0, str(ROOT))
    load_policy(source, f"{commit or 'checkout'}:{MODULE}")
    from tests import test_policy_sim

    return test_policy_sim


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy-from", metavar="COMMIT", help=f"{MODULE} as at this commit")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help=f"a constant of {MODULE} to change first")
    ap.add_argument("--seeds", type=int, default=0, metavar="N",
                    help="the Bernoulli and busy-moment cases over N seeds too")
    ap.add_argument("--processes", type=int, default=None, help="long-lived processes per seed (--seeds)")
    ap.add_argument("--exact-costs", choices=("1", "all"),
                    help="the fresh Bernoulli cases alone, the policy told the 1-row (or every) pass's mean cost")
    args = ap.parse_args()
    if args.exact_costs and args.seeds:
        ap.error("--exact-costs runs the tests' seed alone: leave out --seeds")
    sim = simulator(args.policy_from, tuple(args.set))
    if args.exact_costs:
        exact_costs(sim, args.exact_costs)
        return
    ratios = {f"fresh, acceptance {case_name(sim, a)}": sim.fresh_ratio(a)[0] for a in sim.FRESH_RATES}
    for accept, early in sim.LONG_LIVED_CASES:
        ratios[f"long-lived, acceptance {accept}, first {early} passes rejected"] = sim.long_lived_ratio(accept, early)
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.4f}")
    print(f"mean of the {len(ratios)} Bernoulli cases: {np.mean(list(ratios.values())):.4f}")
    for accept in sim.FRESH_RATES:
        print(f"fresh, the demo pair's measured row costs, acceptance {case_name(sim, accept)}: "
              f"{sim.fresh_ratio(accept, machine=sim.DEMO_MEASURED)[0]:.4f}")
    by_seed = {}
    for machine, case in ((sim.DEMO, "fresh"), (sim.DEMO_MEASURED, "fresh, the demo pair's measured row costs")):
        for accept in sim.FRESH_RATES if args.seeds else ():
            by_seed[f"{case}, acceptance {accept if accept != sim.FALLING else 'falling'}"] = [
                sim.fresh_ratio(accept, seed, machine=machine)[0] for seed in range(2, 2 + args.seeds)]
    for accept, early in sim.LONG_LIVED_CASES if args.seeds else ():
        by_seed[f"long-lived, acceptance {accept}, first {early} passes rejected"] = [
            sim.long_lived_ratio(accept, early, seed, args.processes or sim.LONG_LIVED)
            for seed in range(7, 7 + args.seeds)]
    if args.seeds:
        by_seed[f"a long-lived process whose machine got calmer ({sim.DRIFT[0]:g}x, then {sim.DRIFT[1]:g}x), "
                "acceptance 0.5"] = [sim.drift_ratio(0.5, seed=seed) for seed in range(11, 11 + args.seeds)]
    for length in (2, 3, 6, 12) if args.seeds else ():
        by_seed[f"the coder pair's costs, every cost 1.6x for {length} passes in each hundred (of target-only)"] = [
            sim.busy_moments_run(length, seed=seed)[0] for seed in range(9, 9 + 10 * args.seeds, 10)]
    for name, rs in by_seed.items():
        print(f"{name}, {args.seeds} seeds: mean {np.mean(rs):.4f}, sd {np.std(rs, ddof=1):.4f}, "
              f"standard error {np.std(rs, ddof=1) / np.sqrt(len(rs)):.4f} ({' '.join(f'{r:.4f}' for r in rs)})")
    late = sim.late_start_ratios()
    print(f"a text whose first drafts miss, on a faster VM's costs ({len(late)} fresh processes): median "
          f"{np.median(late):.4f}, 10th percentile {np.percentile(late, 10):.4f}, below 0.85: "
          f"{sum(r < 0.85 for r in late)}")
    for accept in (0.5, 0.8, 0.95):
        ratio, drafting, passes, rechecks = sim.cannot_pay_run(accept)
        print(f"the coder pair's costs (drafting cannot pay), acceptance {accept}: {ratio:.4f} of target-only, "
              f"drafting in {drafting} of {passes} passes, rechecks {rechecks} in {sim.RUNS} fresh processes")
    for length in (2, 3, 6, 12):
        ratio, drafting, passes, rechecks = sim.busy_moments_run(length)
        print(f"the coder pair's costs, every cost 1.6x for {length} passes in each hundred, acceptance 0.95: "
              f"{ratio:.4f} of target-only under the same moments, drafting in {drafting} of {passes} passes, "
              f"rechecks {rechecks} in {sim.RUNS} fresh processes")
    for one_row in (1.0, 1.5, 2.0):
        for accept in (0.8, 0.95):
            ratio, drafting, _ = sim.graphs_run(sim.GPU_DEMO, accept, warm_up=sim.GPU_WARM_UP | {1: one_row})
            print(f"the demo pair on an H200 (drafting cannot pay), its warm-up's 1-row passes {one_row:g}x and draft "
                  f"steps {sim.GPU_WARM_UP_DRAFT:g}x decoding's, acceptance {accept}: {ratio:.4f} of target-only, "
                  f"drafting in {100 * drafting:.1f}% of passes ({sim.RUNS} fresh processes)")
    for switch in (1.5, 2.0):
        for accept in (0.8, 0.95):
            ratio, drafting, _ = sim.graphs_run(sim.gpu_graphs(switch), accept)
            print(f"the demo pair on an H200 (drafting cannot pay), a target pass {switch:g}x dearer where fewer than "
                  f"{sim.SETTLED} of its row count came in a row (CUDA graphs), acceptance {accept}: {ratio:.4f} of "
                  f"target-only, drafting in {100 * drafting:.1f}% of passes ({sim.RUNS} fresh processes)")
            ratio, drafting, k_best = sim.graphs_run(sim.gpu_pays(switch), accept, warm_up=None)
            print(f"... with a draft step of 0.4 ms (drafting pays), acceptance {accept}: {ratio:.4f} of the best "
                  f"fixed k ({k_best}), drafting in {100 * drafting:.1f}% of passes")
    thin, drafting = sim.thin_margin_ratios()
    print(f"the chat pair on a 2-core VM, its warm-up's 1-row passes timed {sim.CHAT_EPYC_WARM_UP_ONE_ROW:.2f}x the "
          f"real ones ({len(thin)} fresh processes): median {np.median(thin):.4f}, 10th percentile "
          f"{np.percentile(thin, 10):.4f}, lowest {min(thin):.4f}, drafting in fewer than 20 passes: "
          f"{sum(d < 20 for d in drafting)}")
    (rows, factor), = sim.CHAT_EPYC_BUSY_WARM_UP.items()
    busy, _ = sim.thin_margin_ratios(warm_up=sim.CHAT_EPYC_BUSY_WARM_UP)
    calm, _ = sim.thin_margin_ratios(warm_up={})
    print(f"the chat pair's costs, its warm-up's {rows}-row passes timed {factor:.2f}x the real ones "
          f"({len(busy)} fresh processes): median {np.median(busy):.4f}, 10th percentile "
          f"{np.percentile(busy, 10):.4f}, lowest {min(busy):.4f}; the same processes with a calm warm-up: "
          f"{np.median(calm):.4f}, {np.percentile(calm, 10):.4f}, {min(calm):.4f}")
    if args.seeds:
        thin, drafting = sim.thin_margin_ratios(sim.THIN_PROCESSES * args.seeds)
        print(f"... over {len(thin)} fresh processes: median {np.median(thin):.4f}, 10th percentile "
              f"{np.percentile(thin, 10):.4f}, lowest {min(thin):.4f}, drafting in fewer than 20 passes: "
              f"{sum(d < 20 for d in drafting)}")
    before, after = sim.DRIFT
    for accept in (0.5, 0.8):
        print(f"a long-lived process whose machine is {before:g}x slower through the warm-up and its first "
              f"{sim.DRIFT_SWITCH} calls, then {after:g}x, acceptance {accept} ({sim.DRIFT_PROCESSES} processes): "
              f"{sim.drift_ratio(accept):.4f} of the best fixed k after the change")
    for kind in sim.TRACE_KINDS:
        ours, control = sim.trace_ratios(kind)
        print(f"real {sim.TRACE_KINDS[kind]} traces ({len(ours)} replays): median {np.median(ours):.4f}, 10th "
              f"percentile {np.percentile(ours, 10):.4f}, mean {np.mean(ours):.4f}; A/A control median "
              f"{np.median(control):.4f}, 10th percentile {np.percentile(control, 10):.4f}")


def case_name(sim: types.ModuleType, accept) -> str:
    """A Bernoulli case's acceptance as the lines print it."""
    return "falling by position, 0.95 to 0.67" if accept == sim.FALLING else str(accept)


def exact_costs(sim: types.ModuleType, which: str) -> None:
    """The fresh Bernoulli cases with the policy's verify costs replaced by the
    demo machine's means (the 1-row pass's, or ``all``)."""
    policy = sim.DraftLengthPolicy
    estimated = policy.verify_cost

    def verify_cost(self, rows: int) -> float:
        return sim.DEMO.verify(rows) if which == "all" or rows == 1 else estimated(self, rows)

    policy.verify_cost = verify_cost
    told = "every pass's" if which == "all" else "the 1-row pass's"
    for accept in sim.FRESH_RATES:
        print(f"fresh, acceptance {case_name(sim, accept)}, the policy told {told} mean cost: "
              f"{sim.fresh_ratio(accept)[0]:.4f}")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
