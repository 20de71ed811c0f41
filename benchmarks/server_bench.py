"""`specllama serve` over HTTP against the same prompts in-process.

Starts `specllama serve` (the Gemma demo pair unless -m/-md/--pair) and loads the same
pair in this process. For 1 and 4 concurrent clients it streams the same
completion requests with speculation on (the server's default) and off
(`"speculative": {"n_max": 0}`), and runs them through `SpeculativeLlama`
here, one after another. Rows interleave (never two at once) and their order
rotates each repetition. Per row: aggregate tokens/s (completion tokens over
the wall time of the batch), the mean decoding tokens/s the responses
report, p50/p95 request latency and time to first token. The goal: the
server's single-client speculative tokens/s within 5% of in-process.

    python benchmarks/server_bench.py                      # demo pair, 2 x 4 requests x 64 tokens per row
    python benchmarks/server_bench.py --requests 2 --repeat 3 -n 32 --json
    python benchmarks/server_bench.py -m target.gguf -md draft.gguf --clients 1,2,8
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
import httpx
from bench_common import free_port, log, run_clients  # noqa: E402
from bench_common import start_server as start  # noqa: E402

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The three most important rules of writing clean code are",
    "Here is a short summary of the history of the printing press:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]
CTX = 2048
SEED = 1
OFF = {"speculative": {"n_max": 0}}


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1), by linear interpolation."""
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def row(mode: str, clients: int | str, results: list[dict], wall: float) -> dict:
    tokens = sum(r["tokens"] for r in results)
    drafted = sum(r["n_drafted"] for r in results)
    return {
        "mode": mode, "clients": clients, "requests": len(results), "tokens": tokens,
        "tokens_per_second": tokens / wall,
        "decode_tokens_per_second": statistics.mean(r["decode_tps"] for r in results),
        "p50_latency_s": percentile([r["latency"] for r in results], 0.5),
        "p95_latency_s": percentile([r["latency"] for r in results], 0.95),
        "p50_ttft_s": percentile([r["ttft"] for r in results], 0.5),
        "acceptance_rate": sum(r["n_accepted"] for r in results) / drafted if drafted else 0.0,
    }


# -- over HTTP ---------------------------------------------------------------------


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specllama", "serve", "--port", str(port), "-c", str(CTX), "--max-queue", "64"]
    if args.model:
        cmd += ["-m", args.model]
    if args.model_draft:
        cmd += ["-md", args.model_draft]
    if not args.model and not args.model_draft:
        cmd += ["--pair", args.pair]
    return start(cmd, port)


def http_request(client: httpx.Client, prompt: str, n_tokens: int, extra: dict) -> dict:
    body = {"prompt": prompt, "max_tokens": n_tokens, "temperature": 0, "seed": SEED, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    start = time.perf_counter()
    ttft = None
    final: dict = {}
    usage: dict = {}
    with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("choices") and event["choices"][0]["text"] and ttft is None:
                ttft = time.perf_counter() - start
            if "speculative" in event:
                final = event
            if "usage" in event:
                usage = event["usage"]
    latency = time.perf_counter() - start
    return {"latency": latency, "ttft": ttft if ttft is not None else latency, "tokens": usage["completion_tokens"],
            "n_drafted": final["speculative"]["n_drafted"], "n_accepted": final["speculative"]["n_accepted"],
            "decode_tps": final["timings"]["predicted_per_second"]}


def http_batch(url: str, n_clients: int, n_requests: int, n_tokens: int, extra: dict) -> tuple[list[dict], float]:
    """n_requests over n_clients threads (each its own connection); the prompts cycle."""
    jobs = [PROMPTS[i % len(PROMPTS)] for i in range(n_requests)]
    return run_clients(url, n_clients, jobs, lambda client, prompt: http_request(client, prompt, n_tokens, extra),
                       timeout=600)


# -- in-process ------------------------------------------------------------------


def in_process_batch(llm, n_requests: int, n_tokens: int, draft_max: int | None) -> tuple[list[dict], float]:
    """The same requests through SpeculativeLlama, one after another."""
    results = []
    start = time.perf_counter()
    for i in range(n_requests):
        results.append(one(llm, PROMPTS[i % len(PROMPTS)], n_tokens, draft_max))
    return results, time.perf_counter() - start


def one(llm, prompt: str, n_tokens: int, draft_max: int | None) -> dict:
    start = time.perf_counter()
    ttft = None
    final = {}
    for chunk in llm.create_completion(prompt, max_tokens=n_tokens, temperature=0, seed=SEED, stream=True,
                                       timings=True, draft_max=draft_max):
        if chunk["choices"][0]["text"] and ttft is None:
            ttft = time.perf_counter() - start
        final = chunk
    latency = time.perf_counter() - start
    return {"latency": latency, "ttft": ttft if ttft is not None else latency,
            "tokens": final["usage"]["completion_tokens"], "n_drafted": final["speculative"]["n_drafted"],
            "n_accepted": final["speculative"]["n_accepted"], "decode_tps": final["timings"]["predicted_per_second"]}


# -- report ------------------------------------------------------------------------


def ratios(rows: list[dict]) -> dict:
    by = {(r["mode"], r["clients"]): r["tokens_per_second"] for r in rows}
    out = {"server_speculative_1_client / in_process_speculative":
           by[("server speculative", 1)] / by[("in-process speculative", "-")],
           "server_n_max_0_1_client / in_process_n_max_0": by[("server n_max 0", 1)] / by[("in-process n_max 0", "-")],
           "in_process speedup (speculative / n_max 0)":
           by[("in-process speculative", "-")] / by[("in-process n_max 0", "-")]}
    for (mode, clients), tps in by.items():
        if mode == "server speculative":
            out[f"server speedup, {clients} client(s) (speculative / n_max 0)"] = tps / by[("server n_max 0", clients)]
    return out


def table(rows: list[dict]) -> str:
    head = f"{'mode':<24}{'clients':>8}{'reqs':>6}{'tok/s':>8}{'decode tok/s':>14}{'p50 lat':>9}{'p95 lat':>9}" \
           f"{'p50 TTFT':>10}{'accept':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['mode']:<24}{r['clients']!s:>8}{r['requests']:>6}{r['tokens_per_second']:>8.1f}"
                     f"{r['decode_tokens_per_second']:>14.1f}{r['p50_latency_s']:>8.2f}s{r['p95_latency_s']:>8.2f}s"
                     f"{r['p50_ttft_s']:>9.3f}s{100 * r['acceptance_rate']:>7.1f}%")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", default=None, help="target GGUF (default: the --pair)")
    p.add_argument("--pair", default="demo", help="a built-in or curated pair when -m/-md are not given "
                                                  "(default demo: Gemma 3 270M F32 + Q4_K_M)")
    p.add_argument("-md", "--model-draft", default=None, help="draft GGUF")
    p.add_argument("-n", "--n-predict", type=int, default=64, help="tokens per request")
    p.add_argument("--requests", type=int, default=4, help="requests per row and repetition")
    p.add_argument("--repeat", type=int, default=2, help="repetitions (the row order rotates)")
    p.add_argument("--clients", default="1,4", help="concurrent clients to try, comma-separated")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    clients = sorted({1, *(int(c) for c in args.clients.split(","))})
    load_before = os.getloadavg()[0]  # the machine may be shared: a busy one makes every figure noisy
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(args, port)
    from specllama.api import SpeculativeLlama

    # both loaded, never running at once: rows interleave, so a change in the machine's load
    # (it is shared) hits the server and in-process runs alike
    llm = SpeculativeLlama(args.model, args.model_draft, pair=None if args.model or args.model_draft else args.pair,
                           n_ctx=CTX, convention="openai")
    plan: list[tuple[str, int | str]] = [("server speculative", 1), ("in-process speculative", "-"),
                                         ("server n_max 0", 1), ("in-process n_max 0", "-")]
    plan += [(mode, c) for c in clients if c != 1 for mode in ("server speculative", "server n_max 0")]
    measured: dict[tuple[str, int | str], tuple[list[dict], float]] = {}
    try:
        http_batch(url, 1, 1, 8, {})  # warm-ups
        one(llm, PROMPTS[0], 8, None)
        for rep in range(args.repeat):
            for mode, n_clients in plan[rep % len(plan):] + plan[:rep % len(plan)]:
                draft_max = 0 if "n_max 0" in mode else None
                if mode.startswith("server"):
                    results, wall = http_batch(url, int(n_clients), args.requests, args.n_predict,
                                               OFF if draft_max == 0 else {})
                else:
                    results, wall = in_process_batch(llm, args.requests, args.n_predict, draft_max)
                old, old_wall = measured.get((mode, n_clients), ([], 0.0))
                measured[(mode, n_clients)] = (old + results, old_wall + wall)
                log(f"[{rep + 1}/{args.repeat}] {mode}, clients {n_clients}: "
                    f"{sum(r['tokens'] for r in results) / wall:.1f} tok/s")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        llm.close()
    rows = [row(mode, c, *measured[(mode, c)]) for mode, c in plan]
    result = {
        "rows": rows, "ratios": ratios(rows),
        "setup": {"model": args.model or "demo pair", "draft": args.model_draft or "demo pair",
                  "tokens_per_request": args.n_predict, "requests_per_row": args.requests * args.repeat,
                  "temperature": 0, "ctx": CTX, "cpus": os.cpu_count(),
                  "machine": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"),
                  "command": " ".join(["python", *sys.argv]), "load_average_before": load_before,
                  "load_average_after": os.getloadavg()[0]},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(table(rows))
    for name, value in result["ratios"].items():
        print(f"{name}: {value:.3f}")
    print(f"load average before/after: {load_before:.2f} / {result['setup']['load_average_after']:.2f}")


if __name__ == "__main__":
    main()
