"""Prompt-lookup drafts mixed with a draft model's (specllama.lookup_mix):
the per-pass choice from past passes, its law, and greedy equality on the
coder pair's fill in the middle."""

from __future__ import annotations

import pytest

from specllama import SpeculativeLlama
from specllama.errors import SpecLlamaError
from specllama.lookup_mix import MIX_DECAY, MIX_PRIOR_ACCEPT, MIX_PRIOR_WEIGHT, LookupMix
from specllama.policy import AdaptivePolicy, PassRecord, WarmUp, expected_tokens

from .stats_helpers import assert_distributed_as
from .test_api import THREADS, detectable, first_two_counts
from .test_demo import demo_paths  # noqa: F401, F811 (a fixture)

SEQ = [5, 6, 7, 8, 9, 5, 6, 7]  # the tail 5 6 7 stood before, followed by 8 9 5 6 7


def policy(draft_ms: float, verify_ms: dict[int, float], accept: float) -> AdaptivePolicy:
    """A policy that measured these costs, and one position at this acceptance over 100 passes."""
    p = AdaptivePolicy()
    p.seed({"draft_seconds": draft_ms / 1000, "verify_seconds": {str(r): t / 1000 for r, t in verify_ms.items()},
            "tried": [100.0] * 8, "accepted": [100.0 * accept] * 8})
    return p


# a target whose extra rows are cheap (memory-bound), and a draft step a fifth of a target step
CHEAP_ROWS = {1: 100.0, 2: 105.0, 3: 110.0, 4: 115.0, 5: 120.0, 9: 140.0}


def test_a_match_is_taken_when_it_promises_more_than_the_draft_model():
    mix = LookupMix()
    p = policy(20.0, CHEAP_ROWS, 0.6)
    # the model at k = 4: E = 1 + .6 + .36 + .216 + .1296 = 2.31 tokens in 80 + 120 ms = 11.5 tokens/s;
    # lookup at the prior 0.5, of the 5 tokens that followed the 3-gram: the first 3 give E = 1.875 in
    # 115 ms = 16.3 tokens/s (all 5: E = 1.97 in 125 ms, a 6-row pass interpolated, = 15.8)
    assert p.rate(4) == pytest.approx(expected_tokens([0.6] * 4, 4) / 0.200, rel=0.02)
    assert mix.plan(SEQ, 8, p, 4) == [8, 9, 5]
    assert mix.plan([1, 2, 3, 4], 8, p, 4) == []  # no earlier occurrence of any tail: the draft model's


def test_no_match_is_taken_where_rows_are_dear_and_the_record_is_poor():
    mix = LookupMix()
    dear = {1: 100.0, 2: 190.0, 5: 450.0, 9: 800.0}  # compute-bound: a row costs almost as much as a pass
    p = policy(20.0, dear, 0.6)
    # E(m) at 0.5 per row is below (m + 1) x 0.9 rows' cost ratio for every m: target-only (k = 0) wins
    assert mix.plan(SEQ, 8, p, 0) == []
    # a lookup record of 0 kept out of 40 tried after 3-gram matches rules them out where rows are cheap too
    mix.tried[3], mix.accepted[3] = 40.0, 0.0
    assert mix.plan(SEQ, 8, policy(20.0, CHEAP_ROWS, 0.6), 4) == []


def test_a_poor_record_fades_back_to_the_prior_so_lookup_is_tried_again():
    """Each pass with a match fades its record by MIX_DECAY: after 0 of 40
    kept, the estimate climbs back toward the prior, and lookup is taken
    again at the first estimate at which some lookup length beats the draft
    model's k = 4 (here after 38 declines: 40 x 0.95^39 = 5.4 tried
    positions, estimate 2 / 9.4 = 0.2125)."""
    mix = LookupMix()
    p = policy(20.0, CHEAP_ROWS, 0.6)
    mix.tried[3] = 40.0
    declined = 0
    while not mix.plan(SEQ, 8, p, 4):
        declined += 1
        assert declined < 200
    tried = 40.0 * MIX_DECAY ** (declined + 1)
    a = MIX_PRIOR_ACCEPT * MIX_PRIOR_WEIGHT / (tried + MIX_PRIOR_WEIGHT)
    assert mix.acceptance(3) == pytest.approx(a)
    before = MIX_PRIOR_ACCEPT * MIX_PRIOR_WEIGHT / (tried / MIX_DECAY + MIX_PRIOR_WEIGHT)
    # taken at the first estimate at which some lookup length beats the model's rate, not before
    best = max(expected_tokens([a] * m, m) / p.verify_cost(m + 1) for m in range(1, 6))
    assert best > p.rate(4) >= max(expected_tokens([before] * m, m) / p.verify_cost(m + 1) for m in range(1, 6))
    # and what it then learns counts toward the 3-gram record only
    mix.observe(5, 2)
    assert mix.tried[3] == pytest.approx(tried + 3) and mix.accepted[3] == 2.0 and mix.tried[1] == 0.0


def test_lookup_passes_on_a_busier_machine_keep_a_cannot_pay_verdict():
    """Lookup passes time target passes of several rows, but no draft step.
    Set against a draft step timed long before, fresh timings of a machine
    that got busier would look as if drafting paid, and the draft model would
    catch up on the whole prompt for nothing. In the cost model they move the
    machine's level, which every kind's cost follows, the draft step's
    included: the verdict stands, and the draft step is dearer too."""
    p = AdaptivePolicy()
    # 9 rows cost 9 x one row, a draft step 1.2 x a target step: compute-bound
    p.observe_warm_up(WarmUp([0.012] * 5, {1: [0.010] * 5, 2: [0.020] * 5, 9: [0.090] * 5}))
    assert p.cannot_pay(8) >= 0.95
    for busy in [1.0] * 10 + [2.0] * 40:  # 2-row lookup passes and 1-row passes, then the machine twice as busy
        p.observe(PassRecord(1, 1, 0.0, 0.020 * busy, 2, lookup=True))
        p.observe(PassRecord(0, 0, 0.0, 0.010 * busy, 1))
    assert p.cannot_pay(8) >= 0.95 and p.choose(8).k == 0
    assert 1.6 < p.costs.seconds("step") / 0.012 < 2.0  # it followed the level (1.79x), never timed again


def test_draft_lookup_needs_a_draft_model(tiny_pair):
    with pytest.raises(SpecLlamaError, match=r"^draft_lookup must be True or False, got 'yes'$"):
        SpeculativeLlama(tiny_pair[0], tiny_pair[1], draft_lookup="yes")
    with pytest.raises(SpecLlamaError, match=r"draft_lookup mixes prompt-lookup drafts with a draft model's, and no "
                                             r"draft model is loaded"):
        SpeculativeLlama(tiny_pair[0], None, n_ctx=256, draft_lookup=True, n_threads=THREADS)


def test_mixed_drafts_keep_the_law(tiny_pair):
    """Drafts from prompt lookup in some passes and from the draft model in
    the others (the choice made per pass from past passes): the first two
    tokens follow the target exactly. N = 3,000: detects w >= 0.195 with
    power 0.99 (the bins as the plain prompt-lookup test's)."""
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=5, draft_max=3, adaptive=False,
                          draft_lookup=True, n_threads=THREADS) as s:
        prompt = s.tokenize("the cat and the dog and the cat and the".encode())
        counts, expected, _ = first_two_counts(s, None, prompt, 3000)
        mix = s.engine.lookup_mix
        looked_up = mix.n_passes
        modelled = s.engine.policy.drafting_passes
        assert looked_up > 300 and modelled > 300, (looked_up, modelled)  # both sources drafted, often
        assert detectable(expected, 3000) <= 0.195
        assert_distributed_as(counts, expected)


def test_mixed_drafts_at_temperature_zero_equal_target_only(demo_paths):  # noqa: F811
    """The demo pair (an F32 target: a row moves by about 0.01 with its batch,
    so greedy output does not hang on the batching) writing code whose
    pattern stands in the prompt: greedy output with mixed drafts equals
    target-only, token for token. (The coder pair's Q4_K_M target moves by
    about 0.4, and its greedy output can part from one-row decoding at a
    near-tie: benchmarks/numerics.py.)"""
    prompt = ("def area_of_square(side):\n    return side ** 2\n\n\ndef area_of_rectangle(width, height):\n"
              "    return width * height\n\n\ndef area_of_square_twice(side):\n    return ")
    with SpeculativeLlama(*demo_paths, n_ctx=1024, draft_max=4, adaptive=False, draft_lookup=True, seed=1,
                          n_threads=THREADS) as s:
        mixed = s.create_completion(prompt, max_tokens=40, temperature=0)
        drafted = s.engine.lookup_mix.n_passes + s.engine.policy.drafting_passes
        alone = s.create_completion(prompt, max_tokens=40, temperature=0, draft_max=0)
    assert mixed["choices"][0]["text"] == alone["choices"][0]["text"] != ""
    assert mixed["speculative"]["n_drafted"] > 0 == alone["speculative"]["n_drafted"] and drafted > 0
