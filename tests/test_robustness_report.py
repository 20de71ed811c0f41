"""benchmarks/robustness.py --report: the rounds of saved runs, pooled (a
20-round measurement made of runs on several days). Measures nothing: the
saved files are written here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "robustness.py"
CONFIGS = ("target-only", "default", "k=2", "k=4", "k=8", "k=4 (A/A)")


def saved(path: Path, rounds: list[list[float]], n: int = 256, runs: list | None = None, **more) -> Path:
    """A --save file of demo at temperature 0, one list of tok/s (by CONFIGS) per round
    (``more``: other arguments saved; without aa_same_seed, a run saved before it existed)."""
    values = {c: [r[i] for r in rounds] for i, c in enumerate(CONFIGS)}
    args = {"n": n, "long_lived": False, "calls": 10, "seed": 1, **more}
    path.write_text(json.dumps({"args": args, "values": [["demo", 0.0, values]],
                                "loads": [["demo", 0.0, {c: [1.0] * len(rounds) for c in CONFIGS}]],
                                **({"runs": runs} if runs is not None else {})}))
    return path


def saved_configs(path: Path, pair: str, temp: float, cell: dict[str, list[float]]) -> Path:
    """A --save file of a --configs run: ``cell``, configuration -> tok/s by round (its keys, in order, the configs)."""
    args = {"n": 256, "long_lived": False, "calls": 10, "seed": 1, "aa_same_seed": False, "configs": ",".join(cell)}
    rounds = len(next(iter(cell.values())))
    path.write_text(json.dumps({"args": args, "values": [[pair, temp, cell]],
                                "loads": [[pair, temp, {c: [1.0] * rounds for c in cell}]]}))
    return path


def report(*files: Path, as_json: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--report", *map(str, files), *(["--json"] if as_json else [])],
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


def test_a_round_without_fixed_drafts_takes_target_only_as_the_best_and_its_twin_as_the_control(tmp_path):
    """--configs "target-only,default,target-only (A/A)" (the coder pair, where no draft length pays)."""
    cell = {"target-only": [40, 40, 50], "default": [39, 42, 45], "target-only (A/A)": [42, 40, 45]}
    path = saved_configs(tmp_path / "coder.json", "demo-coder", 0.0, cell)
    out = report(path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["results"]
    assert row["best_fixed"] == "target-only" and set(row["decode_tps_median"]) == set(cell)
    assert row["ratios"]["default/best-fixed"]["median"] == pytest.approx(39 / 40)  # 0.975, 1.05, 0.9
    assert row["ratios"]["A/A"]["p10"] == pytest.approx(0.9 + 0.2 * (1 - 0.9))  # 1.05, 1.0, 0.9
    six = saved(tmp_path / "six.json", [[40, 60, 50, 55, 60, 55]], aa_same_seed=False)
    out = report(path, six)
    assert out.returncode == 1
    assert out.stderr.strip() == ("--report: files of different runs (configs target-only,default,target-only (A/A) "
                                  "vs target-only,default,k=2,k=4,k=8,k=4 (A/A)) do not pool")


def test_k_8_s_twin_is_the_control_where_it_is_run(tmp_path):
    """--configs "target-only,default,k=8,k=8 (A/A)" (the demo pair at 0.8, whose
    best fixed k is 8): the A/A ratio is k = 8's twin over k = 8."""
    cell = {"target-only": [30, 30, 30], "default": [44, 40, 45], "k=8": [44, 44, 45], "k=8 (A/A)": [44, 42, 54]}
    out = report(saved_configs(tmp_path / "demo.json", "demo", 0.8, cell))
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["results"]
    assert row["best_fixed"] == "k=8"
    assert row["ratios"]["default/best-fixed"]["median"] == pytest.approx(1.0)  # 1.0, 40/44, 1.0
    assert row["ratios"]["A/A"]["median"] == pytest.approx(1.0)  # 1.0, 42/44, 1.2
    assert row["ratios"]["A/A"]["p10"] == pytest.approx(42 / 44 + 0.2 * (1 - 42 / 44))


def test_a_control_without_its_original_is_refused():
    out = subprocess.run([sys.executable, str(SCRIPT), "--configs", "target-only,default,k=8 (A/A)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == ("--configs 'target-only,default,k=8 (A/A)': needs target-only, default, one A/A "
                                  "control (k=4 (A/A), k=8 (A/A), target-only (A/A)) and the configuration it repeats")


def run(config: str, tps: float, text: str, drafted: int, kept: int, passes: int, rnd: int = 1) -> dict:
    """One process's details as --save keeps them (demo, temperature 0)."""
    return {"round": rnd, "pair": "demo", "temperature": 0.0, "config": config, "prompt": "story", "seed": 1,
            "tokens_per_second": tps, "n_drafted": drafted, "n_accepted": kept, "n_target_passes": passes,
            "text": text}


def test_the_processes_details_say_how_noisy_the_rounds_were(tmp_path):
    """Two runs of the same work (one round, configuration and text) differ
    by timing alone; the default's drafts per pass and each configuration's
    share of drafts kept say whether its choices or its texts made a round slow."""
    a = saved(tmp_path / "a.json", [[40, 60, 50, 55, 60, 55]], runs=[
        run("default", 60, "t1", 240, 216, 30), run("default", 50, "t1", 240, 216, 30),  # 1.2x
        run("k=8", 66, "t2", 224, 200, 28), run("k=8", 60, "t2", 224, 200, 28),  # 1.1x
        run("k=4", 50, "t3", 200, 190, 50), run("k=4", 52, "t4", 200, 150, 50),  # two texts: not a pair
    ])
    b = saved(tmp_path / "b.json", [[40, 60, 50, 55, 60, 55]], runs=[
        run("default", 55, "t1", 100, 90, 25), run("default", 55, "t1", 100, 90, 25)])  # another file's round 1
    out = report(a, b)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["results"]
    assert row["noise"] == {
        "identical_work_pairs": 3, "identical_work_spread_median": pytest.approx(1.1),
        "identical_work_spread_max": pytest.approx(1.2), "default_drafts_per_pass": [4.0, 8.0],
        "drafts_kept": {"default": [0.9, 0.9], "k=8": [pytest.approx(200 / 224)] * 2, "k=4": [0.75, 0.95]}}
    text = report_text(a)
    assert ("  the same work run twice (2 pairs): speeds differ by 1.150x at the median, 1.200x at most; the "
            "default drafted 8.00-8.00 per pass\n") in text
    assert ("  share of drafts kept, least and most of a run: default 0.900-0.900, k=8 0.893-0.893, "
            "k=4 0.750-0.950\n") in text
    assert "same work" not in report_text(saved(tmp_path / "c.json", [[40, 60, 50, 55, 60, 55]]))  # no details saved


def report_text(*files: Path) -> str:
    out = report(*files, as_json=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_how_often_identical_work_would_miss_the_goals_is_the_a_a_ratios_resampled(tmp_path):
    """A default that did the control's very work varies as the A/A ratios
    do: the report resamples them (2000 bootstrap draws of as many rounds) for
    the share that would miss each goal. A/A ratios 0.9, 1.1, 0.9, 1.1 give,
    exactly, 5/16 for a median below 0.97 (three or four of four draws at 0.9)
    and 59/256 for a 10th percentile 0.03 below another draw's; 2000 draws put
    a share within 0.04 of its exact value (four standard errors)."""
    rounds = [[40, 60, 50, 50, 60, aa] for aa in (45, 55, 45, 55)]
    (row,) = json.loads(report(saved(tmp_path / "a.json", rounds)).stdout)["results"]
    assert row["ratios"]["A/A"]["median"] == pytest.approx(1.0)

    def p10(js: int) -> float:  # the 10th percentile of 4 draws, js of them 0.9 (the report's interpolation)
        xs = sorted([0.9] * js + [1.1] * (4 - js))
        return xs[0] + 0.3 * (xs[1] - xs[0])

    chance = {js: math.comb(4, js) / 16 for js in range(5)}
    median_below = sum(chance[js] for js in (3, 4))
    p10_below = sum(chance[i] * chance[j] for i in range(5) for j in range(5) if p10(i) < p10(j) - 0.03)
    assert (median_below, p10_below) == (5 / 16, 59 / 256)
    misses = row["identical_work_misses"]
    assert misses["median_below"]["0.97"] == pytest.approx(median_below, abs=0.04)
    assert misses["median_below"]["0.98"] == misses["median_below"]["0.97"]  # no median of draws lies between
    assert misses["p10_below_control"] == pytest.approx(p10_below, abs=0.04)
    assert "  identical work would miss: median < 0.97 in " in report_text(tmp_path / "a.json")
    # no noise at all: never
    (row,) = json.loads(report(saved(tmp_path / "b.json", [[40, 60, 50, 50, 60, 50]] * 4)).stdout)["results"]
    assert row["identical_work_misses"] == {"median_below": {"0.97": 0.0, "0.98": 0.0}, "p10_below_control": 0.0}


def test_a_rotated_round_is_still_abba_and_every_configuration_takes_every_position():
    """--rotate: round r's forward half starts at configuration r (mod their
    number), its backward half mirrors it; over as many rounds as
    configurations, each configuration runs once at every position."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from robustness import round_order
    finally:
        sys.path.remove(str(SCRIPT.parent))
    configs = list(CONFIGS)
    assert round_order(configs, 3, rotate=False) == configs + configs[::-1]
    assert round_order(configs, 2, rotate=True) == [
        "k=2", "k=4", "k=8", "k=4 (A/A)", "target-only", "default",
        "default", "target-only", "k=4 (A/A)", "k=8", "k=4", "k=2"]
    orders = [round_order(configs, r, rotate=True) for r in range(len(configs))]
    for order in orders:
        assert order == order[::-1]  # A B ... B A
    for c in configs:
        assert sorted(order.index(c) for order in orders) == list(range(len(configs)))
