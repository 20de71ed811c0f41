"""Structured output: speed under a JSON schema, speculative against
target-only, with and without forced-token drafts, and against
llama-cpp-python's own JSON mode on the same target.

Each run is a fresh process (``--one``) with empty remembered costs that loads the pair, answers the
extraction messages once each, and prints one JSON line; runs are
interleaved (configurations rotate within a round) and every ratio is a
median over rounds of ratios taken within a round.

    python benchmarks/structured.py                 # chat demo pair, 5 rounds, T=0 and 0.8
    python benchmarks/structured.py --rounds 2 --temps 0
    python benchmarks/structured.py --task tools --pair demo-coder   # a tool call on the coder pair

The tool task asks for one call (``tool_choice="required"``, no parallel
calls) of a weather tool; its configurations are target-only and
speculative with and without forced drafts.

Prints per temperature: decode tok/s (median), tokens per target pass, the
share of emitted tokens that came from forced drafts, the grammar's share of
decoding time, and the ratios the structured-output issue sets goals on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fresh_env, log  # noqa: E402

SENTENCES = [
    "Maria Lopez, 34, lives in Madrid and works as a nurse.",
    "Tom Becker is 52 years old and runs a bakery in Hamburg.",
    "At 27, Aiko Tanaka moved to Osaka to teach music.",
    "Peter Novak, a 45-year-old engineer, lives in Prague.",
    "Lena Svensson (61) has spent her whole life in Uppsala.",
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                   "city": {"type": "string", "maxLength": 40}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
MAX_TOKENS = 64
CONFIGS = ("target-only", "spec-no-forced", "spec", "free-target-only", "free-spec", "llama-cpp-python")
TOOL_CONFIGS = ("target-only", "spec-no-forced", "spec")
NO_TOTALS = {"tokens": 0, "seconds": 0.0, "passes": 0, "forced": 0, "grammar_seconds": 0.0, "valid": 0}
CITIES = ["Madrid", "Hamburg", "Osaka", "Prague", "Uppsala"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def messages(sentence: str) -> list[dict]:
    return [{"role": "user", "content": f"Extract name, age and city as JSON: '{sentence}'"}]


def one(config: str, temperature: float, threads: int | None, seed: int, task: str = "json",
        pair: str = "demo-chat") -> dict:
    """One fresh process's figures for one configuration (all sentences, or all cities)."""
    from specllama.demo import demo_chat_pair, demo_coder_pair

    target, draft = demo_coder_pair() if pair == "demo-coder" else demo_chat_pair()
    if task == "tools":
        return _tools(config, target, draft, temperature, threads, seed)
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    totals = dict(NO_TOTALS)
    if config == "llama-cpp-python":
        from llama_cpp import Llama

        llm = Llama(target, n_ctx=2048, n_threads=threads, verbose=False, seed=seed)
        for sentence in SENTENCES:
            t0 = time.perf_counter()
            r = llm.create_chat_completion(messages(sentence), temperature=temperature, max_tokens=MAX_TOKENS,
                                           response_format={"type": "json_object", "schema": SCHEMA})
            totals["seconds"] += time.perf_counter() - t0  # prompt included: llama-cpp-python reports no split
            totals["tokens"] += r["usage"]["completion_tokens"]
            totals["valid"] += _parses(r["choices"][0]["message"]["content"])
        return totals
    from specllama.api import SpeculativeLlama

    spec = config in ("spec", "spec-no-forced", "free-spec")
    with SpeculativeLlama(target, draft if spec else None, n_ctx=2048, n_threads=threads, seed=seed,
                          forced_drafts=config != "spec-no-forced") as llm:
        for sentence in SENTENCES:
            fmt = None if config.startswith("free") else response_format
            r = llm.create_chat_completion(messages(sentence), temperature=temperature, max_tokens=MAX_TOKENS,
                                           response_format=fmt, timings=True)
            _add(totals, llm.last_stats, fmt is None or _parses(r["choices"][0]["message"]["content"]))
    return totals


def _tools(config: str, target: str, draft: str, temperature: float, threads: int | None, seed: int) -> dict:
    from specllama.api import SpeculativeLlama

    totals = dict(NO_TOTALS)
    with SpeculativeLlama(target, None if config == "target-only" else draft, n_ctx=2048, n_threads=threads,
                          seed=seed, forced_drafts=config != "spec-no-forced", chat_format=_tool_format(target)) as llm:
        for city in CITIES:
            r = llm.create_chat_completion([{"role": "user", "content": f"What is the weather in {city} now?"}],
                                           tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                                           temperature=temperature, max_tokens=MAX_TOKENS)
            calls = r["choices"][0]["message"].get("tool_calls") or []
            _add(totals, llm.last_stats, len(calls) == 1 and _parses(calls[0]["function"]["arguments"]))
    return totals


def _add(totals: dict, stats, valid: bool) -> None:
    """One reply's statistics into a run's totals."""
    totals["tokens"] += stats.n_tokens
    totals["seconds"] += stats.seconds
    totals["passes"] += stats.n_target_passes
    totals["forced"] += stats.n_forced_accepted
    totals["grammar_seconds"] += stats.grammar_seconds
    totals["valid"] += bool(valid)


def _tool_format(target: str) -> str | None:
    """None where the model's own template renders tools (Qwen 2.5), else the hermes format."""
    from specllama.backend import LlamaModel
    from specllama.chat_template import chat_template_for

    with LlamaModel(target, n_ctx=64) as m:
        own = chat_template_for(m.metadata, bos_token=m.bos_text, eos_token=m.eos_text)
    return None if own.renders_tools() else "hermes"


def _parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--temps", default="0,0.8")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--task", choices=("json", "tools"), default="json")
    ap.add_argument("--pair", choices=("demo-chat", "demo-coder"), default="demo-chat")
    ap.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)
    ap.add_argument("--temp", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.temp, args.threads, args.seed, args.task, args.pair)))
        return
    temps = [float(t) for t in args.temps.split(",")]
    configs = TOOL_CONFIGS if args.task == "tools" else CONFIGS
    for temp in temps:
        rows: dict[str, list[dict]] = {c: [] for c in configs}
        for rnd in range(args.rounds):
            order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
            for config in order:
                cmd = [sys.executable, __file__, "--one", config, "--temp", str(temp), "--seed", str(rnd),
                       "--task", args.task, "--pair", args.pair]
                if args.threads:
                    cmd += ["--threads", str(args.threads)]
                with tempfile.TemporaryDirectory() as tmp:  # a first-time user: empty remembered costs
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                         env=fresh_env(tmp)).stdout
                rows[config].append(json.loads(out.strip().splitlines()[-1]))
                r = rows[config][-1]
                log(f"T={temp:g} round {rnd + 1}: {config:>18} {r['tokens'] / r['seconds']:6.1f} tok/s")
        report(temp, rows, args.task)


def report(temp: float, rows: dict[str, list[dict]], task: str = "json") -> None:
    def tps(r: dict) -> float:
        return r["tokens"] / r["seconds"] if r["seconds"] else 0.0

    def ratio(a: str, b: str) -> float:
        return statistics.median(tps(x) / tps(y) for x, y in zip(rows[a], rows[b]))

    print(f"\ntemperature {temp:g}: medians over {len(rows['spec'])} rounds (fresh process per run)")
    print(f"{'configuration':>18}  {'tok/s':>6}  {'tok/pass':>8}  {'forced':>6}  {'grammar':>7}  valid")
    for config, rs in rows.items():
        per_pass = statistics.median(r["tokens"] / r["passes"] for r in rs) if rs[0]["passes"] else float("nan")
        forced = statistics.median(r["forced"] / r["tokens"] for r in rs if r["tokens"])
        grammar = statistics.median(r["grammar_seconds"] / r["seconds"] for r in rs if r["seconds"])
        valid = sum(r["valid"] for r in rs)
        print(f"{config:>18}  {statistics.median(tps(r) for r in rs):6.1f}  {per_pass:8.2f}  {forced:6.1%}  "
              f"{grammar:7.1%}  {valid}/{len(rs) * len(SENTENCES)}")
    if task == "tools":
        print(f"speculative/target-only on one tool call: {ratio('spec', 'target-only'):.2f}x; forced-token drafts "
              f"add {ratio('spec', 'spec-no-forced') - 1:+.1%}")
        return
    free = ratio("free-spec", "free-target-only")
    schema = ratio("spec", "target-only")
    print(f"speculative/target-only: free text {free:.2f}x, under the schema {schema:.2f}x "
          f"({schema / free:.2f} of the free-text ratio; goal >= 0.95)")
    print(f"forced-token drafts add {ratio('spec', 'spec-no-forced') - 1:+.1%} (goal >= +10%)")
    print(f"specllama under the schema / llama-cpp-python's JSON mode: {ratio('spec', 'llama-cpp-python'):.2f}x "
          f"(goal >= the free-text ratio, {free:.2f}x; llama-cpp-python's time includes its prompt)")


if __name__ == "__main__":
    main()
