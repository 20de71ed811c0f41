"""What the draft-length policy chose at each pass of a real generation, and
what each choice rested on: fresh processes of `specllama generate` with an
empty remembered-costs file (what a first-time user gets), the policy's
warm-up timings and acceptance check, then per pass the draft length, the
estimates it was chosen from (acceptance by position, draft step, first step,
1-row and 9-row target passes, the expected tokens per second of each k) and
what the pass did (drafts, kept, draft and verify milliseconds); a padded
target-only pass that re-measures the costs (a probe: its rows, its target pass
and draft step milliseconds, and whether a recheck was under way).

Where robustness.py shows a slow run (its --save files keep each process's
drafts and passes), this shows why: for example a process that gave drafting
up after one pass whose first draft the target rejected.

    python benchmarks/policy_trace.py --runs 6                 # the demo pair, the story prompt, temperature 0
    python benchmarks/policy_trace.py --runs 1 --passes        # every pass
    python benchmarks/policy_trace.py --pair demo-chat --temp 0.8 --seed 7 --save trace.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fresh_env  # noqa: E402
from robustness import PROMPTS  # noqa: E402


def traced_generate(argv: list[str]) -> dict:
    """One generation in this process, the policy's calls recorded (what the engine tells
    :class:`specllama.policy.DraftPolicy` and what it answers)."""
    import dataclasses

    from specllama.cli import main
    from specllama.policy import AdaptivePolicy

    record: list[dict] = []
    policy = AdaptivePolicy
    choose, observe, catch_up = policy.choose, policy.observe, policy.observe_catch_up
    warm_up, agreement = policy.observe_warm_up, policy.observe_agreement

    def ms(seconds):
        return None if seconds is None else round(1000 * seconds, 2)

    def traced_choose(self, cap, **told):
        plan = choose(self, cap, **told)
        if cap > 0:
            record.append({"cap": cap, "k": plan.k, "pad": plan.pad, "cannot_pay": round(self.cannot_pay(cap), 3),
                           "acceptance": [round(a, 3) for a in self.acceptance.means(cap)],
                           "verify_1_ms": ms(self.verify_cost(1)), "verify_9_ms": ms(self.verify_cost(9)),
                           "tokens_per_second_by_k": [round(self.rate(j), 1) for j in range(cap + 1)]})
        return plan

    def traced_observe(self, r):
        record.append({"drafted": r.n_drafted, "kept": r.n_accepted, "rows": r.rows, "draft_ms": ms(r.draft_seconds),
                       "first_step_ms": ms(r.first_step), "verify_ms": ms(r.verify_seconds),
                       "probe_step_ms": ms(r.probe_step), "lookup": r.lookup})
        return observe(self, r)

    def traced_catch_up(self, seconds, n_tokens):
        record.append({"catch_up_ms": ms(seconds), "tokens": n_tokens})
        return catch_up(self, seconds, n_tokens)

    def traced_warm_up(self, warm):
        record.append({"warm_up": {k: ([ms(t) for t in v] if isinstance(v, list) else
                                       {str(r): [ms(t) for t in ts] for r, ts in v.items()})
                                   for k, v in dataclasses.asdict(warm).items()}})
        return warm_up(self, warm)

    def traced_agreement(self, agreed, n):
        record.append({"agreement": [agreed, n]})
        return agreement(self, agreed, n)

    policy.choose, policy.observe, policy.observe_catch_up = traced_choose, traced_observe, traced_catch_up
    policy.observe_warm_up, policy.observe_agreement = traced_warm_up, traced_agreement
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        with out.open("w") as f, contextlib.redirect_stdout(f):
            main(["generate", *argv, "--json"], standalone_mode=False)
        result = json.loads(out.read_text())
    finally:
        out.unlink()
    return {"tokens_per_second": result["tokens_per_second"], "n_target_passes": result["n_target_passes"],
            "n_drafted": result["n_drafted"], "n_accepted": result["n_accepted"], "trace": record}


def summary(run: dict) -> str:
    choices = [e for e in run["trace"] if "k" in e]
    first_zero = next((i + 1 for i, e in enumerate(choices) if e["k"] == 0 and i > 0 and choices[i - 1]["k"]), None)
    agreement = next((e["agreement"] for e in run["trace"] if "agreement" in e), None)
    return (f"{run['tokens_per_second']:.1f} tok/s, {run['n_target_passes']} passes, {run['n_drafted']} drafted, "
            f"{run['n_accepted']} kept; warm-up agreement {agreement[0] if agreement else '-'}/"
            f"{agreement[1] if agreement else '-'}; " + (f"first went target-only after drafting at pass {first_zero}"
                                                           if first_zero else "never went target-only after drafting"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="demo")
    ap.add_argument("--prompt", default="story", choices=list(PROMPTS), help="one of robustness.py's prompts")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=150)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=1, help="fresh processes, one after another")
    ap.add_argument("--passes", action="store_true", help="print every pass")
    ap.add_argument("--save", metavar="FILE", help="write every run's trace to FILE")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one run, JSON on stdout
    args = ap.parse_args()
    argv = ["--pair", args.pair, "-p", PROMPTS[args.prompt], "-n", str(args.n), "--temp", str(args.temp),
            "--seed", str(args.seed), "--ignore-eos"]
    if args.one:
        print(json.dumps(traced_generate(argv)))
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="specllama-trace-") as tmp:
        for i in range(args.runs):
            cmd = [sys.executable, __file__, "--one", "--pair", args.pair, "--prompt", args.prompt, "--temp",
                   str(args.temp), "--seed", str(args.seed), "-n", str(args.n)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=fresh_env(tmp))
            if out.returncode != 0:
                raise SystemExit(f"run {i + 1} failed:\n{out.stderr}")
            run = json.loads(out.stdout.strip().splitlines()[-1])
            runs.append(run)
            print(f"run {i + 1}: {summary(run)}", flush=True)
            if args.passes:
                for event in run["trace"]:
                    print("  " + json.dumps(event))
    if args.save:
        Path(args.save).write_text(json.dumps({"args": vars(args), "runs": runs}))


if __name__ == "__main__":
    main()
