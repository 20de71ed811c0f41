"""Does speculation pay on this machine? Target-only and speculative decoding
on the same prompts, seeds and lengths, in one process, order alternating.

Every figure is a ratio or a cost measured in the same run. The predicted
speedup is Leviathan et al. (2023), Theorem 3.8, with measured costs: a
draft step costs t_draft, a (k+1)-row verify pass costs t_verify (measured,
in place of one target step), and one target-only step costs t_target:

    predicted = E[tokens per pass] * t_target / (k * t_draft + t_verify),
    E[tokens per pass] = (1 - a^(k+1)) / (1 - a)   (a: acceptance rate).

All three costs are time inside llama.cpp, so ``efficiency`` = measured /
predicted shows what the Python loop (and acceptance that is not
independent from position to position) costs.
"""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .generation import stream_generate
from .options import DEFAULT_RULE
from .sampling import SamplingParams
from .speedup import predicted_speedup
from .stats import GenerationStats

_REPETITIVE = (
    "The meeting opened at nine. The committee reviewed the budget. The committee approved the budget. "
    "The committee reviewed the schedule. The committee approved the schedule. The committee reviewed "
    "the hiring plan. The committee approved the hiring plan. The meeting closed at noon. "
)

BUILTIN_PROMPTS: dict[str, str] = {
    "story": "Once upon a time, in a small village by the sea,",
    "code": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "qa": "Question: Why is the sky blue?\nAnswer:",
    "summary": "Minutes:\n" + _REPETITIVE * 2 + "\nSummary of the minutes above:",
}

DEFAULT_DRAFT_MAXES = (1, 2, 4, 8)
DEFAULT_TEMPERATURES = (0.0, 0.8)
DEFAULT_BENCH_TOKENS = 48
QUICK_DRAFT_MAXES = (4,)
QUICK_PROMPTS = ("story", "summary")
QUICK_TOKENS = 32


SCENARIOS = {
    "demo": "the demo pair: F32 Gemma 3 270M target, Q4_K_M draft",
    "self-draft": "the Q4_K_M demo file as both target and draft: a draft step costs a target step, "
                  "so speculation cannot pay and adaptive mode must fall back to target-only",
    "prompt-lookup": "the demo F32 target with n-gram drafts from the text itself (no draft model)",
}


def scenario_paths(name: str) -> tuple[str, str]:
    """(target, draft) files of a named bench scenario."""
    from .demo import demo_pair

    if name not in SCENARIOS:
        raise SpecLlamaError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    target, draft = demo_pair()
    return {"demo": (target, draft), "self-draft": (draft, draft), "prompt-lookup": (target, "prompt-lookup")}[name]


def builtin_prompts(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The built-in prompts, all or the named ones."""
    if names is None:
        return list(BUILTIN_PROMPTS.items())
    unknown = [n for n in names if n not in BUILTIN_PROMPTS]
    if unknown or not names:
        raise SpecLlamaError(f"unknown built-in prompt {unknown[0] if unknown else ''!r}; "
                             f"known: {', '.join(BUILTIN_PROMPTS)}")
    return [(n, BUILTIN_PROMPTS[n]) for n in names]


def load_prompts(path: str) -> list[tuple[str, str]]:
    """Prompts from a UTF-8 file: one per line, or JSON Lines with a
    non-empty "prompt" string (and an optional "name")."""
    p = Path(path)
    if p.is_dir():
        raise SpecLlamaError(f"prompts file {path!r} is a directory (give a file: text lines or JSONL)")
    if not p.exists():  # (a pipe, such as the shell's <(...), is read as a file)
        raise SpecLlamaError(f"prompts file not found: {path!r} (text lines or JSONL with a \"prompt\" key)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecLlamaError(f"prompts file {path!r} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                             f"{e.start})") from None
    except OSError as e:
        raise SpecLlamaError(f"cannot read prompts file {path!r}: {e.strerror}") from None
    prompts = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SpecLlamaError(f"{path!r} line {i} is not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict) or "prompt" not in obj:
                raise SpecLlamaError(f"{path!r} line {i}: a JSON line needs a \"prompt\" key")
            prompt = obj["prompt"]
            if not isinstance(prompt, str) or not prompt.strip():
                raise SpecLlamaError(f"{path!r} line {i}: \"prompt\" must be a non-empty string, got {prompt!r}")
            prompts.append((str(obj.get("name", f"line {i}")), prompt))
        else:
            prompts.append((f"line {i}", line))
    if not prompts:
        raise SpecLlamaError(f"prompts file {path!r} is empty: give one prompt per line, or JSONL")
    return prompts


@dataclass
class BenchRow:
    temperature: float
    draft_max: int
    adaptive: bool
    target_tps: float
    spec_tps: float
    speedup: float
    acceptance_rate: float
    tokens_per_pass: float
    draft_ms_per_token: float
    verify_ms_per_pass: float
    target_ms_per_token: float
    overhead_ms: float
    overhead_fraction: float
    predicted_speedup: float
    efficiency: float
    acceptance_by_position: list[float]
    mean_draft_length: float
    vs_best_fixed: float | None = None  # adaptive rows: worst prompt's tok/s over its best fixed k's
    rule: str = DEFAULT_RULE
    llama_cpp_tps: float = 0.0  # plain llama-cpp-python create_completion on the target
    speedup_vs_llama_cpp: float = 0.0
    target_vs_llama_cpp: float = 0.0  # specllama's own target-only decoding over llama-cpp-python's


@dataclass
class BenchResult:
    rows: list[BenchRow]
    n_tokens: int
    repeat: int
    prompts: list[str]
    peak_rss_mb: float
    verdict: str = ""  # the measured costs' verdict in words (the policy's costs_in_words)

    def best(self) -> BenchRow:
        return max(self.rows, key=lambda r: r.speedup)

    def recommendation(self) -> str:
        """The best configuration measured, then the costs' verdict: whether
        drafting can pay on this machine for this pair, and why not."""
        return self._best_flag() + (f"; {self.verdict}" if self.verdict else "")

    def _best_flag(self) -> str:
        b = self.best()
        if b.adaptive and b.mean_draft_length < 0.5:
            return (f"best: --draft-max 0 or the adaptive default, which falls back to target-only here "
                    f"({b.speedup:.2f}x at temp {b.temperature:g})")
        flag = f"--draft-max {b.draft_max}" + ("" if b.adaptive else " --draft-fixed") + \
            (f" --rule {b.rule}" if b.rule != DEFAULT_RULE else "")
        if b.speedup < 1.0:
            return f"best: --draft-max 0 (speculation did not pay here; best try {flag} " \
                   f"at temp {b.temperature:g}, {b.speedup:.2f}x)"
        return f"best: {flag} at temp {b.temperature:g}, {b.speedup:.2f}x"

    def adaptive_summary(self) -> str:
        rules = {r.rule for r in self.rows}
        parts = [f"temp {r.temperature:g}{f' ({r.rule})' if len(rules) > 1 else ''}: {r.vs_best_fixed:.3f}"
                 for r in self.rows if r.adaptive]
        return "adaptive vs best fixed k, worst prompt: " + ", ".join(parts)

    def as_dict(self) -> dict:
        return {
            "rows": [asdict(r) for r in self.rows],
            "n_tokens": self.n_tokens,
            "repeat": self.repeat,
            "prompts": self.prompts,
            "peak_rss_mb": self.peak_rss_mb,
            "recommendation": self.recommendation(),
            "verdict": self.verdict,
            "adaptive": self.adaptive_summary(),
        }


AUTO = "auto"  # the adaptive configuration, capped at the largest swept k
FIXED = "fixed"
TARGET_ONLY = "target-only"
LLAMA_CPP = "llama-cpp-python"  # plain Llama.create_completion on the target: what users run today


def _run_once(engine: SpeculativeEngine, prompt_tokens: list[int], params: SamplingParams, k: int,
              n_tokens: int, seed: int, adaptive: bool = False, rule: str = DEFAULT_RULE) -> GenerationStats:
    """One generation through the one generation path; its statistics."""
    engine.prefill(prompt_tokens, draft=k > 0)  # both modes start from a cached prompt
    chunk = None
    for chunk in stream_generate(engine, prompt_tokens, params=params, draft_max=k, max_tokens=n_tokens,
                                 rng=np.random.default_rng(seed), adaptive=adaptive, rule=rule):
        pass
    assert chunk is not None
    return chunk.stats


def _run_llama_cpp(engine: SpeculativeEngine, prompt_tokens: list[int], params: SamplingParams, n_tokens: int,
                   seed: int) -> GenerationStats:
    """The same generation by llama-cpp-python's own create_completion."""
    from .backend import plain_completion

    n, seconds = plain_completion(engine.target, prompt_tokens, max_tokens=n_tokens, temperature=params.temperature,
                                  top_k=params.top_k, top_p=params.top_p, min_p=params.min_p, seed=seed)
    return GenerationStats(n_tokens=n, seconds=seconds, n_target_passes=n)


def _row(temperature: float, k: int, base: GenerationStats, spec: GenerationStats, adaptive: bool = False,
         rule: str = DEFAULT_RULE, plain: GenerationStats | None = None) -> BenchRow:
    target_tps = base.tokens_per_second
    spec_tps = spec.tokens_per_second
    acceptance = spec.acceptance_rate
    t_target = base.target_decode_seconds / base.n_target_passes if base.n_target_passes else 0.0
    t_draft = spec.draft_decode_seconds / spec.n_drafted if spec.n_drafted else 0.0
    t_verify = spec.target_decode_seconds / spec.n_target_passes if spec.n_target_passes else 0.0
    overhead = spec.python_seconds / spec.n_target_passes if spec.n_target_passes else 0.0
    speedup = spec_tps / target_tps if target_tps else 0.0
    mean_k = spec.mean_draft_length
    predicted = predicted_speedup(acceptance, mean_k if adaptive else k, t_target, t_draft, t_verify)
    return BenchRow(
        temperature=temperature,
        draft_max=k,
        adaptive=adaptive,
        target_tps=target_tps,
        spec_tps=spec_tps,
        speedup=speedup,
        acceptance_rate=acceptance,
        tokens_per_pass=spec.tokens_per_pass,
        draft_ms_per_token=1000 * t_draft,
        verify_ms_per_pass=1000 * t_verify,
        target_ms_per_token=1000 * t_target,
        overhead_ms=1000 * overhead,
        overhead_fraction=spec.python_seconds / spec.seconds if spec.seconds else 0.0,
        predicted_speedup=predicted,
        efficiency=speedup / predicted if predicted else 0.0,
        acceptance_by_position=spec.acceptance_by_position,
        mean_draft_length=mean_k,
        rule=rule,
        llama_cpp_tps=plain.tokens_per_second if plain else 0.0,
        speedup_vs_llama_cpp=spec_tps / plain.tokens_per_second if plain and plain.tokens_per_second else 0.0,
        target_vs_llama_cpp=target_tps / plain.tokens_per_second if plain and plain.tokens_per_second else 0.0,
    )


def run_bench(
    engine: SpeculativeEngine,
    prompts: Sequence[tuple[str, str]],
    *,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    draft_maxes: Sequence[int] = DEFAULT_DRAFT_MAXES,
    n_tokens: int = DEFAULT_BENCH_TOKENS,
    repeat: int = 1,
    seed: int = 0,
    base_params: SamplingParams = SamplingParams(),
    on_run: Callable[[], None] = lambda: None,
    rules: Sequence[str] = (DEFAULT_RULE,),
    llama_cpp: bool = True,
) -> BenchResult:
    """Measure target-only against each draft length at each temperature.

    Args:
        engine: a pair with a draft model.
        prompts: (name, text) pairs.
        temperatures, draft_maxes: the sweep (draft lengths >= 1).
        n_tokens: tokens generated per run.
        repeat: passes over the prompts.
        seed: runs of one prompt and pass share a seed across configurations.
        base_params: top-k, top-p, min-p for every run (temperature is swept).
        on_run: called after each run (a progress bar's update).
        rules: the acceptance rules to measure (each gets fixed and adaptive rows).
        llama_cpp: also time llama-cpp-python's plain create_completion.
    """
    if engine.drafter is None:
        raise SpecLlamaError("bench needs a draft model (-md/--model-draft) or -md prompt-lookup")
    if not temperatures or not draft_maxes:
        raise SpecLlamaError("bench needs at least one temperature and one draft length")
    if any(k < 1 for k in draft_maxes):
        raise SpecLlamaError(f"draft lengths to sweep must be >= 1 (0, target only, is always measured), "
                             f"got {list(draft_maxes)}")
    if repeat < 1:
        raise SpecLlamaError(f"repeat must be >= 1, got {repeat}")
    draft_maxes = draft_lengths(engine, draft_maxes)
    encoded = [engine.target.tokenize(text) for _, text in prompts]
    for (name, _), toks in zip(prompts, encoded):
        if len(toks) + n_tokens + max(draft_maxes) + 1 > engine.target.n_ctx:
            raise SpecLlamaError(f"prompt {name!r} ({len(toks)} tokens) plus {n_tokens} new tokens does not fit "
                                 f"the context of {engine.target.n_ctx} (-c/--ctx-size)")
    cap = max(draft_maxes)
    configs: list[tuple[str, int, str]] = [(TARGET_ONLY, 0, "token")] + ([(LLAMA_CPP, 0, "token")] if llama_cpp else [])
    configs += [(FIXED, k, rule) for rule in rules for k in draft_maxes] + [(AUTO, cap, rule) for rule in rules]
    # warm-up: the first decodes of a process are slower (allocation, caches)
    warm = encoded[0]
    for k in (0, cap):
        _run_once(engine, warm, SamplingParams(temperature=0), k, 8, seed)

    rows = []
    for temperature in temperatures:
        params = SamplingParams(temperature=temperature, top_k=base_params.top_k, top_p=base_params.top_p,
                                min_p=base_params.min_p)
        tallies = {c: GenerationStats() for c in configs}
        per_prompt: dict[tuple, list[float]] = {}
        for r in range(repeat):
            for j, toks in enumerate(encoded):
                order = configs if (r + j) % 2 == 0 else configs[::-1]
                for c in order:
                    kind, k, rule = c
                    s_ = seed + 1000 * r + j
                    run = (_run_llama_cpp(engine, toks, params, n_tokens, s_) if kind == LLAMA_CPP else
                           _run_once(engine, toks, params, k, n_tokens, s_, adaptive=kind == AUTO, rule=rule))
                    tallies[c] = tallies[c] + run
                    per_prompt.setdefault((c, j), []).append(run.tokens_per_second)
                    on_run()
        base = tallies[(TARGET_ONLY, 0, "token")]
        plain = tallies.get((LLAMA_CPP, 0, "token"))
        for rule in rules:
            rows += [_row(temperature, k, base, tallies[(FIXED, k, rule)], rule=rule, plain=plain)
                     for k in draft_maxes]
            auto = _row(temperature, cap, base, tallies[(AUTO, cap, rule)], adaptive=True, rule=rule, plain=plain)
            auto.vs_best_fixed = min(
                float(np.mean(per_prompt[((AUTO, cap, rule), j)]))
                / max(float(np.mean(per_prompt[((FIXED, k, rule), j)])) for k in draft_maxes)
                for j in range(len(encoded))
            )
            rows.append(auto)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_mb = peak_kb / 1024 if sys.platform != "darwin" else peak_kb / 2**20
    verdict = engine.policy.costs_in_words(cap)
    return BenchResult(rows, n_tokens, repeat, [name for name, _ in prompts], peak_mb, verdict)


def draft_lengths(engine, draft_maxes: Sequence[int]) -> list[int]:
    """The draft lengths a sweep runs: each at most what one target batch holds beside the pass's first row
    (:meth:`~specllama.engine.SpeculativeEngine.draft_cap`), once each."""
    return list(dict.fromkeys(engine.draft_cap(k) for k in draft_maxes))


def n_runs(n_prompts: int, temperatures: Sequence[float], draft_maxes: Sequence[int], repeat: int,
           n_rules: int = 1, llama_cpp: bool = True) -> int:
    return n_prompts * len(temperatures) * ((len(draft_maxes) + 1) * n_rules + 1 + llama_cpp) * repeat


TABLE_COLUMNS = [
    ("temp", "temperature", "{:g}"),
    ("rule", "rule", "{}"),
    ("k", "draft_max", "{}"),
    ("llama-cpp-python tok/s", "llama_cpp_tps", "{:.1f}"),
    ("target tok/s", "target_tps", "{:.1f}"),
    ("spec tok/s", "spec_tps", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("vs llama-cpp-python", "speedup_vs_llama_cpp", "{:.2f}x"),
    ("accept", "acceptance_rate", "{:.0%}"),
    ("tok/pass", "tokens_per_pass", "{:.2f}"),
    ("draft ms/tok", "draft_ms_per_token", "{:.1f}"),
    ("verify ms/pass", "verify_ms_per_pass", "{:.1f}"),
    ("overhead ms", "overhead_ms", "{:.2f}"),
    ("predicted", "predicted_speedup", "{:.2f}x"),
    ("efficiency", "efficiency", "{:.2f}"),
]


def format_table(result: BenchResult) -> str:
    cells = [[h for h, _, _ in TABLE_COLUMNS]]
    for row in result.rows:
        cells.append([fmt.format(getattr(row, key)) for _, key, fmt in TABLE_COLUMNS])
        if row.adaptive:
            cells[-1][2] = f"auto<={row.draft_max} ({row.mean_draft_length:.1f})"
    widths = [max(len(r[i]) for r in cells) for i in range(len(TABLE_COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
