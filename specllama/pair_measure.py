"""``specllama pair``: each local model that can draft for a target, measured for
real with the bench's machinery (a warm-up, then target-only, a fixed draft
length and the adaptive default on the same prompts, at temperature 0), and the
costs' verdict in their own words: whether drafting can pay on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .local_models import Candidate, LocalModel
from .pairing import MAX_REASONS

PAIR_PROMPTS = ("story", "code")  # bench's built-in prompts each candidate is measured on
PAIR_TOKENS = 32  # tokens per run
PAIR_DRAFT_MAX = 4  # the fixed draft length measured (bench --quick's)
PAIR_CTX = 512  # context of the models loaded for the measurement


@dataclass(frozen=True)
class Measured:
    """One candidate measured as a draft for the target."""

    candidate: Candidate
    acceptance: float  # at the fixed draft length
    tokens_per_pass: float
    predicted: float  # from the measured costs and acceptance (bench's prediction)
    speedup_fixed: float  # measured, fixed draft length, over target-only
    speedup_default: float  # measured, the adaptive default, over target-only
    cannot_pay: bool
    verdict: str  # the costs' verdict in words

    @property
    def best_speedup(self) -> float:
        return max(self.speedup_fixed, self.speedup_default)


def measure_drafts(target: str, drafts: list[Candidate], *, n_tokens: int = PAIR_TOKENS,
                   draft_max: int = PAIR_DRAFT_MAX, n_ctx: int = PAIR_CTX, n_threads: int | None = None,
                   n_gpu_layers: int = 0, n_gpu_layers_draft: int | None = None, seed: int = 0,
                   on_run: Callable[[], None] = lambda: None) -> list[Measured]:
    """Measure each draft with ``target`` on this machine (bench's runs at temperature 0, on the
    ``PAIR_PROMPTS``): acceptance, tokens per pass, predicted and measured speed-up, the verdict.

    Args:
        on_run: called after each generation (``n_runs(drafts)`` in all): a progress bar's update.
    """
    from . import bench
    from .opener import open_engine
    from .sampling import SamplingParams

    prompts = bench.builtin_prompts(PAIR_PROMPTS)
    out = []
    for c in drafts:
        with open_engine(target, c.model.path, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                         n_gpu_layers_draft=n_gpu_layers_draft) as engine:
            result = bench.run_bench(engine, prompts, temperatures=[0.0], draft_maxes=[draft_max], n_tokens=n_tokens,
                                     seed=seed, base_params=SamplingParams(temperature=0.0), on_run=on_run,
                                     llama_cpp=False)
            fixed, default = (next(r for r in result.rows if r.adaptive is adaptive) for adaptive in (False, True))
            cannot_pay = engine.policy.verdict(engine.draft_cap(draft_max)) is not None
            out.append(Measured(c, fixed.acceptance_rate, fixed.tokens_per_pass, fixed.predicted_speedup,
                                fixed.speedup, default.speedup, cannot_pay, result.verdict))
    return out


def n_runs(n_drafts: int) -> int:
    """Generations :func:`measure_drafts` runs for ``n_drafts`` drafts (a progress bar's length)."""
    from .bench import n_runs as bench_runs

    return n_drafts * bench_runs(len(PAIR_PROMPTS), [0.0], [PAIR_DRAFT_MAX], 1, 1, llama_cpp=False)


def winner(measured: list[Measured]) -> Measured:
    """The draft with the best measured speed-up among those whose costs can pay (where none can, the
    decoding is target-only whichever is taken, and a speed-up measured then is noise)."""
    return max(measured, key=lambda m: (not m.cannot_pay, m.best_speedup, -m.candidate.model.cost_bytes))


def save_winner(name: str, target_ref: str, measured: list[Measured]):
    """Save the best draft with the target as the pair ``name`` (with what was measured). Returns the file."""
    from .saved_pairs import save_pair

    best = winner(measured)
    return save_pair(name, target_ref, best.candidate.model.ref, measured={
        "acceptance": round(best.acceptance, 4), "tokens_per_pass": round(best.tokens_per_pass, 4),
        "speedup": round(best.best_speedup, 4), "cannot_pay": best.cannot_pay})


def verdict_word(m: Measured) -> str:
    if m.cannot_pay:
        return "cannot pay"
    return "pays" if m.best_speedup >= 1.0 else "did not pay"


PAIR_COLUMNS = ("draft", "expected", "accept", "tok/pass", "predicted", f"k={PAIR_DRAFT_MAX}", "default", "verdict")


def format_pairing(target: LocalModel, measured: list[Measured], refused: list[Candidate]) -> str:
    """``specllama pair``'s report: the table, each draft's verdict in words, the models refused and why."""
    cells = [list(PAIR_COLUMNS)] + [[m.candidate.model.ref, f"{m.candidate.expected:.2f}x", f"{m.acceptance:.0%}",
                                     f"{m.tokens_per_pass:.2f}", f"{m.predicted:.2f}x", f"{m.speedup_fixed:.2f}x",
                                     f"{m.speedup_default:.2f}x", verdict_word(m)] for m in measured]
    widths = [max(len(row[i]) for row in cells) for i in range(len(PAIR_COLUMNS))]
    lines = [f"target {target.ref} ({target.architecture}, {target.quantization}); drafts measured at temperature 0, "
             f"{PAIR_TOKENS} tokens on the {' and '.join(PAIR_PROMPTS)} prompts:"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(2, "  ".join("-" * w for w in widths))
    lines += [f"{m.candidate.model.ref}: {m.verdict}" for m in measured]
    lines += [f"refused: {c.model.ref}: {c.reason}" for c in refused[:MAX_REASONS]]
    if len(refused) > MAX_REASONS:
        lines.append(f"refused: and {len(refused) - MAX_REASONS} more (specllama models --local lists them)")
    return "\n".join(lines)
