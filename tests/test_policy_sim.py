"""The draft-length policy on the simulated machines of benchmarks/policy_sim.py:
no models, no timing. Every named scenario at one seed against its goal
(``policy_sim.goal``), and the machines checked against what was measured.
``python benchmarks/policy_sim.py`` prints the same scenarios over 8 seeds,
and ``--against REV`` another revision's policy beside them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import policy_sim as sim  # noqa: E402

from specllama.engine import WARM_UP_DRAFTED  # noqa: E402
from specllama.policy import DEFAULT_DRAFT_MAX, WARM_UP_TIMINGS  # noqa: E402

# Where the policy reads below its goal at the tests' seed (issue 47's goals not reached yet; python
# benchmarks/policy_sim.py --seeds 8 --against 901f476 prints them all): strict, so a change that reaches a goal shows.
SHORT_OF_GOAL: dict[str, str] = {  # seed 0; the mean (range) over 8 seeds; 901f476's policy at seed 0
    "fresh demo-measured falling": "0.9519; 8 seeds 0.9543 (0.9501-0.9575); 901f476 0.9706",
    "coder busier machine": "0.9687; 8 seeds 0.9682 (0.9654-0.9705); 901f476 0.9861",
    "chat thin margin p10": "0.8996; 8 seeds 0.9008 (0.8872-0.9406); 901f476 0.9434",
    "chat busy warm-up p10": "0.8996; 8 seeds 0.8857 (0.8751-0.8996); 901f476 0.8886",
    "traces sampled p10 - A/A p10": "-0.0322; 8 seeds -0.0328 (-0.0365--0.0288); 901f476 -0.0238",
}


def test_the_simulator_drives_the_engine_s_constants():
    assert (sim.CAP, sim.WARM_UP_TIMINGS, sim.WARM_UP_DRAFTED) == (DEFAULT_DRAFT_MAX, WARM_UP_TIMINGS, WARM_UP_DRAFTED)


@pytest.mark.slow  # the simulator's long runs: many simulated processes, each a policy over hundreds of passes
def test_the_machines_are_the_measured_ones():
    assert sim.DEMO.verify(9) / sim.DEMO.verify(1) == pytest.approx(2.7)
    assert [sim.CODER.verify(n) for n in (1, 2, 9)] == pytest.approx([0.0267, 0.046, 0.136])
    # the coder pair: even perfect acceptance cannot pay (k = 8: 9 tokens in 8 x 14.5 ms plus the first step's second
    # token, 3.3 ms, and a 136 ms pass, against 9 x 26.7 ms)
    best = max(sim.CODER.expected_rate(k, 1.0) for k in range(1, sim.CAP + 1))
    assert best == pytest.approx(9 / (0.252 + 0.0145 * 0.23)) and best < 1 / sim.CODER.verify(1)
    assert max(sim.DEMO.expected_rate(k, 1.0) for k in range(1, sim.CAP + 1)) > 1 / sim.DEMO.verify(1)
    # the fixed k that paid best on the measured demo costs, by acceptance
    assert {name: sim.best_fixed(sim.DEMO_MEASURED, a, seed=1)[0] for name, a in
            (("0.5", 0.5), ("0.8", 0.8), ("0.95", 0.95), ("0.98", 0.98), ("falling", sim.FALLING))} == {
        "0.5": 0, "0.8": 0, "0.95": 5, "0.98": 8, "falling": 4}


@pytest.fixture(scope="module")
def figures() -> dict[str, float]:
    """Every scenario at seed 0, computed on every core at once."""
    names = list(sim.scenarios())
    return {name: values[0] for name, values in sim.table(names, seeds=1).items()}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=SHORT_OF_GOAL[n])]
                                                if n in SHORT_OF_GOAL else []) for n in sim.scenarios()])
def test_each_scenario_reaches_its_goal(figures, name):
    assert figures[name] >= sim.goal(name), figures[name]


@pytest.mark.slow  # the simulator's long runs: many simulated processes, each a policy over hundreds of passes
@pytest.mark.parametrize("accept", [0.5, 0.95])
def test_where_drafting_cannot_pay_it_hardly_drafts(accept):
    """The coder pair's costs: at most 2% of passes draft (the warm-up's verdict, and what exploring costs)."""
    outcome = sim.against_target_only(sim.CODER, accept, 4)
    assert outcome.drafting <= 0.02, outcome
    assert outcome.figure >= 0.97, outcome


@pytest.mark.slow  # the simulator's long runs: many simulated processes, each a policy over hundreds of passes
def test_where_drafting_pays_on_a_gpu_it_drafts():
    outcome = sim.fresh(sim.gpu_pays(2.0), 0.95, 2)
    assert outcome.drafting >= 0.9, outcome


def test_the_goals_are_the_issues():
    assert [sim.goal(n) for n in ("fresh demo 0.8", "coder busy moments 3", "coder 1-row moments 6",
                                  "gpu pays 2.0x 0.8", "gpu pays 2.0x 0.95", "late start p10",
                                  "traces sampled p10 - A/A p10")] == [0.97, 0.98, 0.92, 0.9, 0.97, 0.93, -0.03]
    assert np.isclose(sim.goal("long-lived machine calmer 0.5"), 0.99)


@pytest.mark.xfail(strict=True, reason="0.683: 2 of the 48 processes never draft again after the late start's "
                   "early rejections (0.683, 0.687; no probe among their passes). Their posterior still gives "
                   "acceptance a 28-35% chance to be high enough for drafting to pay (above 0.833), but what one "
                   "pass would tell cannot move the estimate that far; pricing runs of up to 64 passes (KG*, "
                   "benchmarks/history/runs/policy-2026-12-06/policy_sim_8_seeds_kg_star.md) left one of the two")
def test_probes_do_not_stand_in_for_drafting_where_acceptance_is_in_doubt():
    """A probe times costs, not acceptance. Where only the drawn acceptance made
    drafting pay, probes in its place repeated without end (one process of the
    late start's read 0.554 of the best fixed k, in 37 probes and 2 drafting
    passes); drafting itself tells: the worst of the 48 now reads 0.81."""
    assert min(sim.late_start(0)) >= 0.75


def test_each_trace_s_replays_read_apart():
    """--by-trace: a line per greedy trace and one of means. On one fixed text the best fixed k hangs on where its few
    rejections fall (the demo pair's recipe trace: k = 7 reads 1.000 and k = 8 0.963, where the chat pair's traces
    at the same acceptance read k = 7 0.98 of k = 8), so the traces' figures measure that luck too."""
    lines = sim.by_trace(seeds=1)
    assert len(lines) == 1 + sum(len(pair["traces"]) for pair in sim.TRACES["pairs"].values()) == 13
    assert lines[-1].startswith("means: the policy noiseless ")
    assert lines[1].startswith("demo/recipe: best fixed k 7 (k = 7, 8: 1.000, 0.963)")
    assert lines[6].startswith("demo-chat/essay: best fixed k 8 (k = 7, 8: 0.981, 1.000)")


@pytest.mark.slow  # 120 simulated processes, and the best fixed k's 972 calls for each acceptance
def test_by_process_groups_every_fresh_process_and_reads_the_scenario_s_figure():
    """--by-process: each fresh demo-measured scenario's processes by how many passes they drafted, with each group's
    figure and the scenario's. Every process is in one group; a group's figure is its processes' tokens over their
    seconds, over the best fixed k's; the scenario's is fresh()'s (the same runs), the mean over the seeds; at
    acceptance 0.98 every process drafts through (no group but the last)."""
    lines = sim.by_process(seeds=2, runs=6)
    assert [line.split(",")[0] for line in lines] == [f"fresh demo-measured {name}" for _, name in sim.FRESH_ACCEPTANCE]
    for (accept, _), line in zip(sim.FRESH_ACCEPTANCE, lines):
        counts = [int(part.split("(")[0].split()[-1]) for part in line.split(": ", 1)[1].split("; ")[0].split(", ")]
        runs = [sim._fresh_runs(sim.DEMO_MEASURED, accept, seed, runs=6) for seed in (2, 3)]
        drafted = [p.drafting_passes for procs, _ in runs for p in procs]
        calls = [call for _, results in runs for call in results]
        assert sum(counts) == 12
        _, best = sim.best_fixed(sim.DEMO_MEASURED, accept, seed=1)
        for label, member in (("never drafted", lambda n: n == 0), ("drafted 1-19 passes", lambda n: 0 < n < 20),
                              ("20 or more", lambda n: n >= 20)):
            group = [call for n, call in zip(drafted, calls) if member(n)]
            assert f"{label} {len(group)}" + (f" ({sim.tps(group) / best:.3f})" if group else "") in line
        figure = np.mean([sim.tps(results) / best for _, results in runs])  # fresh()'s figure, seed by seed
        assert line.endswith(f"; figure {figure:.4f}")
    assert "never drafted 0, drafted 1-19 passes 0, 20 or more 12 (" in lines[3]
