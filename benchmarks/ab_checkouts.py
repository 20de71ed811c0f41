"""Two or more checkouts of specllama, fresh processes interleaved: what a change
did to real runs, where benchmarks/policy_sim.py --policy-from says what it
did in the simulator.

Each configuration is NAME=CHECKOUT[:FLAGS]: a directory holding specllama
(a `git worktree add --detach DIR COMMIT`), run as `python -m specllama
generate` with that directory first on PYTHONPATH and FLAGS added. Every run
is a fresh process with an empty remembered-costs file (what a first-time
user gets), 256 tokens of one of robustness.py's held-out prompts, the
configurations in ABBA order round by round. Printed per round: each
configuration's decode tok/s and target passes; then per configuration the
median tok/s and passes, and the median and geometric mean of its ratio to
the last configuration's run in the same round; and where its policy says
(`generate --json`'s "policy"), its rechecks of a cannot-pay verdict, padded
probe passes and drafting passes, all told.

    git worktree add --detach /tmp/old 5416fee
    python benchmarks/ab_checkouts.py --pair demo --prompt story --rounds 8 \\
        old=/tmp/old new=. "k8=/tmp/old:--draft-fixed --draft-max 8"
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fresh_env  # noqa: E402
from robustness import PROMPTS, generate_command  # noqa: E402


def configuration(value: str) -> tuple[str, Path, list[str]]:
    """NAME=CHECKOUT[:FLAGS] -> (name, checkout, flags)."""
    name, sep, spec = value.partition("=")
    checkout, _, flags = spec.partition(":")
    path = Path(checkout).resolve()
    if not sep or not name or not (path / "specllama" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=CHECKOUT[:FLAGS], CHECKOUT a directory "
                                         "holding specllama/")
    return name, path, flags.split()


def run(checkout: Path, flags: list[str], pair: str, prompt: str, temp: float, seed: int, tmp: str) -> dict:
    cmd = generate_command(pair, PROMPTS[prompt], 256, temp, seed, flags)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=checkout,
                         env=fresh_env(tmp) | {"PYTHONPATH": str(checkout)})
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} in {checkout} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="demo")
    ap.add_argument("--prompt", default="story", choices=sorted(PROMPTS))
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=230, help="round r runs with seed + r")
    ap.add_argument("configs", nargs="+", type=configuration, metavar="NAME=CHECKOUT[:FLAGS]")
    args = ap.parse_args()
    got: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in args.configs}
    policy: dict[str, list[dict]] = {name: [] for name, _, _ in args.configs}
    with tempfile.TemporaryDirectory(prefix="specllama-ab-") as tmp:
        for r in range(args.rounds):
            order = args.configs if r % 2 == 0 else args.configs[::-1]
            for name, checkout, flags in order:
                out = run(checkout, flags, args.pair, args.prompt, args.temp, args.seed + r, tmp)
                got[name].append((out["tokens_per_second"], out["n_target_passes"]))
                policy[name].append(out.get("policy") or {})
            print(f"round {r + 1}: " + "  ".join(f"{n} {got[n][-1][0]:.1f} tok/s, {got[n][-1][1]} passes" for n in got),
                  flush=True)
    ref = args.configs[-1][0]
    for name, runs in got.items():
        ratios = [a[0] / b[0] for a, b in zip(runs, got[ref])]
        print(f"{name}: median {statistics.median(t for t, _ in runs):.1f} tok/s, "
              f"{statistics.median(p for _, p in runs):g} passes (fewest {min(p for _, p in runs)}, most "
              f"{max(p for _, p in runs)}); / {ref}: median {statistics.median(ratios):.3f}, geometric mean "
              f"{math.exp(statistics.mean(math.log(x) for x in ratios)):.3f}")
        told = {key: sum(d[key] for d in policy[name]) for key in ("rechecks", "probes", "drafting_passes")
                if policy[name] and all(key in d for d in policy[name])}
        if told:
            print(f"  {name}, all told over {len(runs)} runs: " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                                             for k, v in told.items()))


if __name__ == "__main__":
    main()
