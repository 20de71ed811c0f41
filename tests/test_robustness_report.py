"""benchmarks/robustness.py --report: the rounds of saved runs, pooled (a
20-round measurement made of runs on several days). Measures nothing: the
saved files are written here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "robustness.py"
CONFIGS = ("target-only", "default", "k=2", "k=4", "k=8", "k=4 (A/A)")


def saved(path: Path, rounds: list[list[float]], n: int = 256, **more) -> Path:
    """A --save file of demo at temperature 0, one list of tok/s (by CONFIGS) per round
    (``more``: other arguments saved; without aa_same_seed, a run saved before it existed)."""
    values = {c: [r[i] for r in rounds] for i, c in enumerate(CONFIGS)}
    args = {"n": n, "long_lived": False, "calls": 10, "seed": 1, **more}
    path.write_text(json.dumps({"args": args, "values": [["demo", 0.0, values]],
                                "loads": [["demo", 0.0, {c: [1.0] * len(rounds) for c in CONFIGS}]]}))
    return path


def report(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--report", *map(str, files), "--json"],
                          capture_output=True, text=True, timeout=60)


def test_the_rounds_of_several_runs_are_pooled(tmp_path):
    a = saved(tmp_path / "a.json", [[40, 60, 50, 55, 60, 55], [40, 58, 50, 55, 58, 50]])
    b = saved(tmp_path / "b.json", [[40, 66, 50, 55, 60, 55]])
    out = report(a, b)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (row,) = data["results"]
    assert (data["rounds"], row["rounds"], row["best_fixed"]) == (3, 3, "k=8")
    assert row["decode_tps_median"]["default"] == 60
    ratios = row["ratios"]
    assert ratios["default/best-fixed"]["median"] == pytest.approx(1.0)  # 60/60, 58/58, 66/60
    assert ratios["default/best-fixed"]["p10"] == pytest.approx(1.0)
    assert ratios["A/A"]["median"] == pytest.approx(1.0)  # 55/55, 50/55, 55/55
    assert ratios["A/A"]["p10"] == pytest.approx(50 / 55 + 0.2 * (1 - 50 / 55))


def test_runs_of_another_length_do_not_pool(tmp_path):
    a = saved(tmp_path / "a.json", [[40, 60, 50, 55, 60, 55]])
    b = saved(tmp_path / "b.json", [[40, 60, 50, 55, 60, 55]], n=128)
    out = report(a, b)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "--report: files of different runs (n 256 vs 128) do not pool"
    # an A/A twin on k = 4's seed (as runs saved before --aa-same-seed) against one on a seed of its own
    c = saved(tmp_path / "c.json", [[40, 60, 50, 55, 60, 55]], aa_same_seed=False)
    out = report(a, c)
    assert out.returncode == 1
    assert out.stderr.strip() == "--report: files of different runs (aa_same_seed True vs False) do not pool"
    assert report(c, saved(tmp_path / "d.json", [[40, 60, 50, 55, 60, 55]], aa_same_seed=False)).returncode == 0
