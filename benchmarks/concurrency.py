"""Many clients at once: `specllama serve -np 1` (one request at a time) against `-np 4` (parallel slots),
with drafting and without (`"speculative": {"n_max": 0}` on the -np 4 server: target-only in slots).

Both servers run the same pair, loaded side by side; never two rows at once: the rows interleave and their
order rotates each repetition, so a change in the machine's load hits every configuration alike (each specllama
server starts as a first-time user's: an empty remembered-costs file); the -np 1
server is measured twice per repetition (an A/A control: the spread a ratio must beat). A slot running alone
drafts as a single stream does; with others running, the draft length is the batch's (specllama/policy/batch.py).
Each row:
`--requests` streamed chat requests of mixed lengths (32, 64 and 128 tokens, cycling) over C concurrent
clients; aggregate tokens/s (completion tokens over the row's wall time), time to first token and request
latency (p50, p95), and the draft tokens per generated token (0 without drafting: where the time went).
Ratios are within one run: -np 4 / -np 1, and -np 4 / -np 4 target-only.

    python benchmarks/concurrency.py                              # demo-chat pair, temperatures 0 and 0.8
    python benchmarks/concurrency.py --pair demo-coder --clients 1,4 --requests 8 --repeat 2 --json

With --fixed-k 1,2,4, -np 4 servers that always draft k tokens (`--draft-fixed --draft-max k`) join the table.
With --llama-server, llama.cpp's own server joins the table, built from the installed llama-cpp-python's
llama.cpp as native_compare.py builds its tools (minutes, once): `-np 4` without a draft and with the same
draft (its defaults otherwise: this llama.cpp drafts at most 3 tokens, by its match rule).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import httpx
from bench_common import free_port, fresh_env, log, run_clients, start_server  # noqa: E402
from server_bench import percentile  # noqa: E402

QUESTIONS = [
    "Tell me a short story about a lighthouse keeper.",
    "What are three rules of writing clean code?",
    "Summarise the history of the printing press.",
    "Explain what a hash table is to a new programmer.",
    "Write a haiku about autumn rain.",
    "Why is the sky blue?",
]
LENGTHS = (32, 64, 128)
CTX = 8192  # shared by the slots
SEED = 1
OFF = {"speculative": {"n_max": 0}}


def start(args: argparse.Namespace, port: int, n_parallel: int, tmp: str, extra: tuple[str, ...] = ()
          ) -> subprocess.Popen:
    """``specllama serve`` as a first-time user starts it: the defaults, an empty remembered-costs file."""
    cmd = [sys.executable, "-m", "specllama", "serve", "--port", str(port), "-c", str(CTX), "--max-queue", "64",
           "-np", str(n_parallel), "--no-webui", *extra]
    cmd += ["-m", args.model, "-md", args.model_draft] if args.model else ["--pair", args.pair]
    return start_server(cmd, port, timeout=600, env=fresh_env(tmp))


def start_llama_server(binary: str, target: str, draft: str | None, port: int) -> subprocess.Popen:
    cmd = [binary, "-m", target, "--port", str(port), "-c", str(CTX), "-np", "4", "-t", str(os.cpu_count() or 1),
           "--no-webui"] + (["-md", draft] if draft else [])
    return start_server(cmd, port, timeout=600)


def chat(client: httpx.Client, question: str, n_tokens: int, temperature: float, extra: dict) -> dict:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": n_tokens, "temperature": temperature,
            "seed": SEED, "stream": True, "stream_options": {"include_usage": True}, **extra}
    start_t = time.perf_counter()
    ttft, usage, pieces, drafted = None, {}, 0, None
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - start_t
            usage = event.get("usage") or usage
            # the draft tokens it took: specllama's "speculative" object; llama-server's "timings", which leave
            # out "draft_n" where it drafted none (None where neither came)
            if "speculative" in event or "timings" in event:
                drafted = (event.get("speculative") or {}).get("n_drafted", (event.get("timings") or {}).get(
                    "draft_n", 0))
    latency = time.perf_counter() - start_t
    # a server that sends no usage: its content chunks (one token each, as llama-server streams)
    return {"latency": latency, "ttft": latency if ttft is None else ttft,
            "tokens": usage.get("completion_tokens", pieces), "drafted": drafted}


def batch(url: str, n_clients: int, n_requests: int, temperature: float, extra: dict) -> tuple[list[dict], float]:
    jobs = [(QUESTIONS[i % len(QUESTIONS)], LENGTHS[i % len(LENGTHS)]) for i in range(n_requests)]
    return run_clients(url, n_clients, jobs, lambda client, job: chat(client, *job, temperature, extra))


def summary(results: list[dict], wall: float) -> dict:
    return {"requests": len(results), "tokens": sum(r["tokens"] for r in results),
            "tokens_per_second": sum(r["tokens"] for r in results) / wall,
            "p50_ttft_s": percentile([r["ttft"] for r in results], 0.5),
            "p95_ttft_s": percentile([r["ttft"] for r in results], 0.95),
            "p50_latency_s": percentile([r["latency"] for r in results], 0.5),
            "p95_latency_s": percentile([r["latency"] for r in results], 0.95),
            "drafted_per_token": None if any(r["drafted"] is None for r in results) else
            sum(r["drafted"] for r in results) / max(sum(r["tokens"] for r in results), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo-chat", help="a built-in or curated pair (default demo-chat)")
    p.add_argument("-m", "--model", default=None, help="target GGUF (with -md; instead of --pair)")
    p.add_argument("-md", "--model-draft", default=None, help="draft GGUF")
    p.add_argument("--clients", default="1,2,4,8", help="concurrent clients, comma-separated")
    p.add_argument("--temperatures", default="0,0.8", help="comma-separated")
    p.add_argument("--requests", type=int, default=8, help="requests per row and repetition")
    p.add_argument("--repeat", type=int, default=2, help="repetitions (the row order rotates)")
    p.add_argument("--llama-server", action="store_true", help="also llama.cpp's llama-server (-np 4), built once")
    p.add_argument("--fixed-k", default="", help="also -np 4 servers that always draft k, comma-separated ks")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    temps = [float(t) for t in args.temperatures.split(",")]
    load_before = os.getloadavg()[0]
    ports = {1: free_port(), 4: free_port()}
    tmp = tempfile.mkdtemp(prefix="specllama-concurrency-")
    procs = {n: start(args, port, n, tmp) for n, port in ports.items()}
    # "-np 1 (A/A)": the same server again, at another place in the order: the spread a ratio must beat
    configs = {"-np 1": (1, {}), "-np 4 target-only": (4, OFF), "-np 1 (A/A)": (1, {}), "-np 4": (4, {})}
    for k in [int(k) for k in args.fixed_k.split(",") if k]:
        name = f"-np 4, fixed k = {k}"
        ports[name] = free_port()
        procs[name] = start(args, ports[name], 4, tmp, ("--draft-fixed", "--draft-max", str(k)))
        configs[name] = (name, {})
    if args.llama_server:
        from native_compare import build, llama_cpp_version

        from specllama.opener import resolve_paths

        binary = str(build(llama_cpp_version(), os.cpu_count() or 1, ("llama-server",))["llama-server"])
        target, draft = resolve_paths(args.model, args.model_draft, None if args.model else args.pair)
        for name, with_draft in (("llama-server -np 4 target-only", False), ("llama-server -np 4 + draft", True)):
            ports[name] = free_port()
            procs[name] = start_llama_server(binary, target, draft if with_draft else None, ports[name])
            configs[name] = (name, {})
    plan = [(name, c, t) for t in temps for c in clients for name in configs]
    measured: dict[tuple, tuple[list, float]] = {}
    try:
        for n, port in ports.items():  # warm-ups
            batch(f"http://127.0.0.1:{port}", 1, 1, 0.0, {})
        for rep in range(args.repeat):
            for name, c, t in plan[rep % len(plan):] + plan[:rep % len(plan)]:
                n, extra = configs[name]
                results, wall = batch(f"http://127.0.0.1:{ports[n]}", c, args.requests, t, extra)
                old, old_wall = measured.get((name, c, t), ([], 0.0))
                measured[(name, c, t)] = (old + results, old_wall + wall)
                log(f"[{rep + 1}/{args.repeat}] {name}, {c} client(s), T={t}: "
                    f"{sum(r['tokens'] for r in results) / wall:.1f} tok/s")
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    rows = [{"config": name, "clients": c, "temperature": t, **summary(*measured[(name, c, t)])}
            for name, c, t in plan]
    by = {(r["config"], r["clients"], r["temperature"]): r["tokens_per_second"] for r in rows}
    ratios = {}
    for t in temps:
        for c in clients:
            ratios[f"T={t} {c} client(s): -np 4 / -np 1"] = by[("-np 4", c, t)] / by[("-np 1", c, t)]
            ratios[f"T={t} {c} client(s): A/A, -np 1 (A/A) / -np 1"] = by[("-np 1 (A/A)", c, t)] / by[("-np 1", c, t)]
            ratios[f"T={t} {c} client(s): -np 4 / -np 4 target-only"] = (
                by[("-np 4", c, t)] / by[("-np 4 target-only", c, t)])
            for name in configs:
                if name.startswith("-np 4, fixed"):
                    ratios[f"T={t} {c} client(s): {name} / -np 4 target-only"] = (
                        by[(name, c, t)] / by[("-np 4 target-only", c, t)])
            if args.llama_server:
                ratios[f"T={t} {c} client(s): -np 4 / llama-server -np 4 + draft"] = (
                    by[("-np 4", c, t)] / by[("llama-server -np 4 + draft", c, t)])
                ratios[f"T={t} {c} client(s): -np 4 / llama-server -np 4 target-only"] = (
                    by[("-np 4", c, t)] / by[("llama-server -np 4 target-only", c, t)])
    result = {"rows": rows, "ratios": ratios, "setup": {
        "pair": args.model and f"{args.model} + {args.model_draft}" or args.pair, "ctx": CTX,
        "requests_per_row": args.requests * args.repeat, "lengths": LENGTHS, "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", *sys.argv]), "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0]}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    head = (f"{'config':<20}{'clients':>8}{'T':>5}{'tok/s':>8}{'TTFT p50':>10}{'p95':>7}{'latency p50':>13}{'p95':>7}"
            f"{'drafted/token':>15}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['config']:<20}{r['clients']:>8}{r['temperature']:>5}{r['tokens_per_second']:>8.1f}"
              f"{r['p50_ttft_s']:>9.2f}s{r['p95_ttft_s']:>6.2f}s{r['p50_latency_s']:>12.2f}s{r['p95_latency_s']:>6.2f}s"
              f"{'?' if r['drafted_per_token'] is None else format(r['drafted_per_token'], '.2f'):>15}")
    for name, value in ratios.items():
        print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
