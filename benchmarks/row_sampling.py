"""The per-row work outside llama.cpp: turning one logits row into its sampling distribution.

The demo pair's real rows: the draft continues ``--prompt`` for ``--tokens`` tokens at
temperature 0.8 (seeded), then the target scores the prompt and that continuation in one
batch, and so does the draft: the target's rows are verify rows at the draft's tokens, the
draft's are the rows its drafts are drawn from. They are timed in batches of ``--rows`` (k + 1
= 9: one verify pass at k = 8), each batch first copied into one buffer (as llama.cpp's freshly
written one), through the sampler as it was at ``--before`` (``git show
REV:specllama/sampling.py``, loaded as a module) and the checked-out one, interleaved batch by
batch, ``--repeat`` times. A target row is ``sparse_probs``; a draft row is the drafter's step,
which before also checked the row for a finite logit (``np.isfinite(row).any()``) and now calls
``sparse_probs_or_none``. Printed per setting: the median microseconds per row of each, their
ratio, and whether the two gave the same ids and the same float64 probabilities on every row
(they must: the same law, bit for bit).

Beside them, the floor: one read of the row (``row.max()``, numpy's fastest pass over it), the least
any sampler does with a row.

Each twice: with the caches warm, and after reading ``--evict-mb`` MB (256: about what one
pass of the demo draft or target streams through the caches) before each batch of target rows
and before each draft row, as in decoding: a verify pass comes before a batch of target rows,
a draft step before each draft row. Cold, numpy's fixed cost per call dominates.

Settings: temperature 0.8 with the default top-k 40 / top-p 0.95 / min-p 0.05, and
temperature 0; ``--random`` times random rows of shape (rows, 262144) instead of the demo's.

    python benchmarks/row_sampling.py
    python benchmarks/row_sampling.py --repeat 50 --tokens 64
    python benchmarks/row_sampling.py --random --evict-mb 0
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specllama import sampling
from specllama.sampling import SamplingParams

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"temp 0.8, top-k 40, top-p 0.95, min-p 0.05": SamplingParams(),
            "temp 0 (greedy)": SamplingParams(temperature=0.0)}


def load_before(rev: str):
    """specllama/sampling.py at ``rev``, imported as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:specllama/sampling.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"sampling_{rev}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"sampling_{rev}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  (its dataclasses look their module up)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def demo_rows(prompt: str, n_tokens: int, seed: int, threads: int | None) -> dict[str, np.ndarray]:
    """The demo target's and draft's rows over the prompt's last token and a draft continuation."""
    from specllama.backend import LlamaModel
    from specllama.demo import demo_pair

    target_path, draft_path = demo_pair()
    rng = np.random.default_rng(seed)
    params = SamplingParams()
    with LlamaModel(draft_path, n_ctx=1024, n_threads=threads) as draft:
        tokens = draft.tokenize(prompt)
        row = draft.eval(tokens, n_logits=1)[0]
        text: list[int] = []
        while len(text) < n_tokens:
            tok = sampling.sparse_probs(row, params).sample(float(rng.random()))
            if draft.is_eog(tok):
                break
            text.append(tok)
            row = draft.eval([tok], n_logits=1)[0]
        draft.rewind(0)
        q_rows = draft.eval(tokens + text[:-1], n_logits=len(text))
    with LlamaModel(target_path, n_ctx=1024, n_threads=threads) as target:
        p_rows = target.eval(tokens + text[:-1], n_logits=len(text))
    return {"target rows": p_rows, "draft rows": q_rows}


def same(a, b) -> bool:
    return a.ids.dtype == b.ids.dtype and np.array_equal(a.ids, b.ids) and np.array_equal(a.probs, b.probs)


def time_rows(rows: np.ndarray, batch: int, repeat: int, fns: dict, evict: np.ndarray | None, per_row: bool
              ) -> tuple[dict[str, float], bool]:
    """Median microseconds per row of each of ``fns`` (row -> distribution) over ``repeat``
    rounds of every batch, interleaved, and whether they agreed on every row. Each batch is
    written into one buffer first (``per_row``: each row, just before it is sampled), and with
    ``evict`` that array is read through before, as a llama.cpp pass streams the weights
    through the caches and then writes its rows."""
    buffer = np.empty((batch, rows.shape[1]), dtype=rows.dtype)
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    agree = True
    for r in range(repeat):
        for start in range(0, rows.shape[0] - batch + 1, batch):
            out = {}
            for name in names if (r + start // batch) % 2 == 0 else names[::-1]:
                seconds, dists = 0.0, []
                for i in range(batch):
                    if per_row or i == 0:
                        if evict is not None:
                            evict.sum()  # the pass streams the weights through the caches,
                        written = 1 if per_row else batch  # then writes its rows, as llama.cpp does
                        buffer[i:i + written] = rows[start + i:start + i + written]
                    t0 = time.perf_counter()
                    dists.append(fns[name](buffer[i]))
                    seconds += time.perf_counter() - t0
                times[name].append(seconds / batch)
                out[name] = dists
            if r == 0:
                first = out[names[0]]
                agree &= all(same(a, b) for name in names[1:] for a, b in zip(first, out[name]))
    return {name: 1e6 * statistics.median(ts) for name, ts in times.items()}, agree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="e00939f", help="the revision whose sampler is the baseline")
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--tokens", type=int, default=126, help="continuation tokens (rows per model)")
    ap.add_argument("--rows", type=int, default=9, help="rows per batch (k + 1)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--random", action="store_true", help="random rows (rows, 262144) instead of the demo's")
    ap.add_argument("--evict-mb", type=int, default=256,
                    help="MB read between rows for the cold timings, as a pass streams the weights (0: none)")
    args = ap.parse_args()
    before = load_before(args.before)
    if args.random:
        rng = np.random.default_rng(args.seed)
        logits = (rng.standard_normal((args.tokens, 262_144)) * 2.5).astype(np.float32)
        logits[np.arange(args.tokens), rng.integers(0, 262_144, args.tokens)] += rng.uniform(5, 25, args.tokens)
        kinds = {"target rows": logits}
    else:
        kinds = demo_rows(args.prompt, args.tokens, args.seed, args.threads)
    evict = np.ones(args.evict_mb << 18, dtype=np.float32) if args.evict_mb else None
    print(f"sampler at {args.before} vs now, median us per row, {args.repeat} rounds of batches of {args.rows} "
          f"rows (python {sys.version.split()[0]}, numpy {np.__version__})")
    for kind, rows in kinds.items():
        draft = kind == "draft rows"
        for name, params in SETTINGS.items():
            if draft:  # the drafter's step: the row checked for a finite logit, then sampled
                fns = {"before": lambda row, p=params: before.sparse_probs(row, p) if np.isfinite(row).any() else None,
                       "now": lambda row, p=params: sampling.sparse_probs_or_none(row, p)}
            else:
                fns = {"before": lambda row, p=params: before.sparse_probs(row, p),
                       "now": lambda row, p=params: sampling.sparse_probs(row, p)}
            for cold in ([False, True] if evict is not None else [False]):
                t, agree = time_rows(rows, args.rows, args.repeat, fns, evict if cold else None, per_row=draft)
                # the least any sampler does with a row: read it once (numpy's fastest pass, a max)
                floor, _ = time_rows(rows, args.rows, args.repeat, {"floor": lambda row: row.max()},
                                     evict if cold else None, per_row=draft)
                where = (f"after {args.evict_mb} MB read" + (" (each row)" if draft else " (each batch)")) if cold \
                    else "caches warm"
                print(f"  {kind:<12} {name:<42} {where:<30} before {t['before']:7.1f}  now {t['now']:7.1f}  "
                      f"({t['before'] / t['now']:4.2f}x)  one read {floor['floor']:5.1f}  "
                      f"same law: {'yes' if agree else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
