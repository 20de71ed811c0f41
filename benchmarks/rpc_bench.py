"""The target through a local RPC server against the target in-process.

Starts `specllama rpc-server` on a free local port and opens the demo pair
twice in this process: once all local, once with every target layer on the
server (`--rpc 127.0.0.1:PORT -ngl 99`; the draft stays local). First the
cost of one target pass of 1, 5 and 9 rows in each setting (the fastest of
--passes timings each). Then, for each repetition, temperature and prompt, in
a rotating order, four generations of -n tokens: local target-only
(`--draft-max 0`), local speculative (the default: adaptive, up to 8), RPC
target-only, RPC speculative. Never two at once. It prints the median
tokens/s of each, and the speed-up of speculation over target-only in each
setting: the RPC setting is where a target pass is dearest, and the flatter
its cost in rows, the more speculation pays.

    python benchmarks/rpc_bench.py                   # demo pair, 2 prompts x 2 temperatures x 2 repetitions, 64 tokens
    python benchmarks/rpc_bench.py --repeat 3 -n 96 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import free_port, log  # noqa: E402

CTX = 2048
SEED = 1
PROMPTS = ("story", "code")
SETTINGS = ("local", "rpc")
MODES = ("target-only", "speculative")


def start_server(port: int, threads: int) -> subprocess.Popen:
    from specllama.backend.rpc import probe
    from specllama.errors import SpecLlamaError

    proc = subprocess.Popen([sys.executable, "-m", "specllama", "rpc-server", "-p", str(port), "-t", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            probe(f"127.0.0.1:{port}", timeout=1.0)
            return proc
        except SpecLlamaError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("rpc-server did not start")
            time.sleep(0.1)


def pass_costs(model, rows: list[int], passes: int) -> dict[int, float]:
    """Seconds of one pass of each row count: the fastest of ``passes``."""
    best: dict[int, float] = {}
    for _ in range(passes):
        for n, seconds in model.warm_up(rows).items():
            best[n] = min(best.get(n, seconds), seconds)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=64, help="tokens per generation")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--temp", default="0,0.8")
    ap.add_argument("--only", default=",".join(PROMPTS), help="built-in prompts (story, code, qa, summary)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, help="threads, client and server")
    ap.add_argument("--server-threads", type=int, default=None,
                    help="the RPC server's threads (default: -t; llama.cpp's own rpc-server takes half the cores)")
    ap.add_argument("--passes", type=int, default=5, help="timings per row count for the pass costs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from specllama.bench import builtin_prompts
    from specllama.demo import demo_pair
    from specllama.generation import generate
    from specllama.opener import open_engine
    from specllama.sampling import SamplingParams

    temperatures = [float(t) for t in args.temp.split(",")]
    prompts = builtin_prompts(args.only.split(","))
    target, draft = demo_pair()
    port = free_port()
    load_before = os.getloadavg()[0]
    server_threads = args.server_threads or args.threads
    server = start_server(port, server_threads)
    endpoint = f"127.0.0.1:{port}"
    try:
        engines = {
            "local": open_engine(target, draft, n_ctx=CTX, n_threads=args.threads),
            "rpc": open_engine(target, draft, n_ctx=CTX, n_threads=args.threads, n_gpu_layers=99,
                               rpc_servers=endpoint),
        }
        rows_n = [1, 5, 9]
        costs = {}
        for setting in SETTINGS:  # pass costs: each setting timed in turn (the runs below interleave)
            costs[setting] = pass_costs(engines[setting].target, rows_n, args.passes)
        draft_step = pass_costs(engines["local"].draft, [1], args.passes)[1]
        runs: dict[tuple, list[dict]] = {}
        configs = [(s, m) for s in SETTINGS for m in MODES]
        i = 0
        for rep in range(args.repeat):
            for temp in temperatures:
                for name, prompt in prompts:
                    order = configs[i % len(configs):] + configs[: i % len(configs)]
                    i += 1
                    for setting, mode in order:
                        params = SamplingParams(temperature=temp, seed=SEED + rep)
                        r = generate(engines[setting], prompt, params=params, max_tokens=args.n,
                                     draft_max=0 if mode == "target-only" else 8)
                        st = r.stats
                        runs.setdefault((temp, setting, mode), []).append(
                            {"prompt": name, "tps": st.tokens_per_second, "acceptance": st.acceptance_rate,
                             "tokens_per_pass": st.tokens_per_pass, "tokens": len(r.tokens)})
                        log(f"rep {rep} T={temp:g} {name:<6} {setting:<5} {mode:<11} {st.tokens_per_second:6.1f} "
                            f"tok/s, {st.tokens_per_pass:.2f} tokens/pass")
        for engine in engines.values():
            engine.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)

    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "threads": args.threads, "server_threads": server_threads, "tokens": args.n, "repeat": args.repeat,
        "prompts": [n for n, _ in prompts],
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "pass_ms": {s: {n: 1000 * c for n, c in costs[s].items()} for s in SETTINGS},
        "draft_step_ms": 1000 * draft_step,
        "rows": [],
    }
    for temp in temperatures:
        for setting in SETTINGS:
            base = statistics.median(r["tps"] for r in runs[(temp, setting, "target-only")])
            spec_runs = runs[(temp, setting, "speculative")]
            spec = statistics.median(r["tps"] for r in spec_runs)
            result["rows"].append({"temperature": temp, "setting": setting, "target_only_tps": base,
                                   "speculative_tps": spec, "speedup": spec / base,
                                   "acceptance": statistics.median(r["acceptance"] for r in spec_runs),
                                   "tokens_per_pass": statistics.median(r["tokens_per_pass"] for r in spec_runs)})
    if args.json:
        print(json.dumps(result))
        return
    print(f"rpc_bench {result['date']}: {result['machine']}, -t {args.threads} (server {server_threads}), demo pair, "
          f"{args.n} tokens x "
          f"{len(prompts)} prompts x {args.repeat}; load average {load_before:.2f} before, "
          f"{result['load_after']:.2f} after")
    print("target pass, ms:   " + "   ".join(
        f"{s}: " + " / ".join(f"{result['pass_ms'][s][n]:.0f}" for n in rows_n) + " (1 / 5 / 9 rows)"
        for s in SETTINGS) + f"   draft step {result['draft_step_ms']:.0f} ms")
    print(f"{'temp':>4}  {'setting':<7}  {'target-only':>11}  {'speculative':>11}  {'speed-up':>8}  "
          f"{'acceptance':>10}  {'tokens/pass':>11}")
    for row in result["rows"]:
        print(f"{row['temperature']:>4g}  {row['setting']:<7}  {row['target_only_tps']:>7.1f} t/s  "
              f"{row['speculative_tps']:>7.1f} t/s  {row['speedup']:>7.2f}x  {row['acceptance']:>10.1%}  "
              f"{row['tokens_per_pass']:>11.2f}")


if __name__ == "__main__":
    main()
