"""Parallel slots (specllama/slots.py): several generations at once, their passes decoded in shared batches,
each exactly as if it ran alone. On the tiny pair, real llama.cpp caches with several sequences."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specllama import SpeculativeLlama
from specllama.backend import LlamaModel
from specllama.engine import SpeculativeEngine
from specllama.slots import PIECE, Slots

from .conftest import open_tiny_engine
from .stats_helpers import assert_distributed_as
from .two_token_law import EOS, N_RUNS, PLAIN, PROMPT, detectable, first_two_tokens, two_token_law

PROMPTS = ["once upon a time", "the king said", "a b c d e", "there lived a"]


def open_slots(tiny_pair, n: int, n_ctx: int = 1024) -> Slots:
    def open_engine():
        target, draft = tiny_pair
        return SpeculativeEngine(LlamaModel(target, n_ctx=n_ctx, n_threads=1, n_seq_max=n),
                                 LlamaModel(draft, n_ctx=n_ctx, n_threads=1, n_seq_max=n))
    return Slots(open_engine, n)


def test_one_batch_of_several_sequences_gives_each_its_own_logits(tiny_pair):
    model, alone = LlamaModel(tiny_pair[0], n_ctx=256, n_seq_max=3), LlamaModel(tiny_pair[0], n_ctx=256)
    try:
        a, b = alone.tokenize(PROMPTS[0]), alone.tokenize(PROMPTS[1])
        want_a = alone.eval(a, n_logits=2)
        alone.rewind(0)
        want_b = alone.eval(b, n_logits=3)
        s0, s1 = model.sequence(0), model.sequence(1)
        got_a, got_b = (r.copy() for r in model.decode_batch([(s0, a, 2), (s1, b, 3)]))
        assert np.abs(got_a - want_a).max() < 1e-4 and np.abs(got_b - want_b).max() < 1e-4
        assert (s0.tokens, s1.tokens, model.tokens) == (a, b, a)  # sequence 0's view is the model's own
        assert model.free_cells() == 256 - len(a) - len(b)
        s1.rewind(1)
        assert model.free_cells() == 256 - len(a) - 1
    finally:
        model.close()
        alone.close()


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "fixed"])
def test_at_temperature_0_each_of_4_concurrent_streams_equals_its_solo_run(tiny_pair, adaptive):
    t, d = tiny_pair
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1, adaptive=adaptive, draft_max=4) as solo:
        want = [solo.create_completion(p, max_tokens=48, temperature=0)["choices"][0]["text"] for p in PROMPTS]
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1, adaptive=adaptive, draft_max=4, n_parallel=4) as par:
        got: list = [None] * 4
        streamed: list = [[] for _ in PROMPTS]
        ready = threading.Barrier(4)  # all four ask at once, however busy the machine (its threads start late)

        def run(i: int) -> None:
            ready.wait(60)
            for chunk in par.create_completion(PROMPTS[i], max_tokens=48, temperature=0, stream=True):
                streamed[i].append(chunk["choices"][0]["text"])
            got[i] = "".join(streamed[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert got == want
        # they ran together: target passes held several sequences' rows
        assert par.slots.n_target_rows > 1.5 * par.slots.n_target_passes


def test_a_grammar_request_and_a_free_one_side_by_side(tiny_pair):
    t, d = tiny_pair
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    calls = [dict(prompt=PROMPTS[0], max_tokens=30, temperature=0, json_schema=schema),
             dict(prompt=PROMPTS[1], max_tokens=30, temperature=0)]
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1) as solo:
        want = [solo.create_completion(**c)["choices"][0] for c in calls]
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1, n_parallel=2) as par:
        got: list = [None, None]
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, par.create_completion(**calls[i])[
            "choices"][0])) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    assert [(g["text"], g["finish_reason"]) for g in got] == [(w["text"], w["finish_reason"]) for w in want]


def test_a_stream_closed_mid_generation_leaves_the_others_unchanged(tiny_pair):
    t, d = tiny_pair
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1) as solo:
        want = [solo.create_completion(p, max_tokens=40, temperature=0)["choices"][0]["text"] for p in PROMPTS[1:]]
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1, n_parallel=4) as par:
        gone = par.create_completion(PROMPTS[0], max_tokens=200, temperature=0.8, stream=True)
        others = [par.create_completion(p, max_tokens=40, temperature=0, stream=True) for p in PROMPTS[1:]]
        next(gone)
        texts = ["" for _ in others]
        for i, chunk in enumerate(next(s) for s in others):  # one chunk each, while the first runs
            texts[i] += chunk["choices"][0]["text"]
        gone.close()  # ends after its current pass; its slot frees
        for i, s in enumerate(others):
            texts[i] += "".join(c["choices"][0]["text"] for c in s)
        assert texts == want
        assert par.slots.busy == 0


def test_a_slot_whose_shared_cache_fills_ends_with_length_while_the_others_go_on(tiny_pair):
    """Two generations whose lengths add up to more than the 256 cells they share: the one that finds the cells
    gone ends with "length" short of its max_tokens, and the other goes on to its own (the first's cache, idle
    then, makes room)."""
    t, d = tiny_pair
    n_ctx, no_eos = 256, {EOS: -100.0}
    with SpeculativeLlama(t, d, n_ctx=n_ctx, n_threads=1, n_parallel=2) as par:
        wanted = {PROMPTS[0]: n_ctx - len(par.tokenize(PROMPTS[0])), PROMPTS[1]: 200}  # 0: until the context is full
        streams = {p: par.create_completion(p, max_tokens=0 if p == PROMPTS[0] else 200, temperature=0,
                                            logit_bias=no_eos, stream=True, timings=True) for p in PROMPTS[:2]}
        firsts = {p: next(s) for p, s in streams.items()}  # both running
        ends = {p: [firsts[p], *s][-1] for p, s in streams.items()}
    got = {p: e["usage"]["completion_tokens"] for p, e in ends.items()}
    assert all(e["choices"][0]["finish_reason"] == "length" for e in ends.values())
    cut = [p for p in got if got[p] < wanted[p]]
    assert len(cut) == 1, (got, wanted)  # one ran out of shared cells; the other reached its max_tokens
    assert got[cut[0]] >= 40  # it ran a while before the cells were gone


def test_a_long_prompt_joins_in_pieces_while_a_stream_keeps_flowing(tiny_pair, monkeypatch):
    decode, batches = LlamaModel.decode_batch, []

    def recorded(self, pieces):  # per target decode: (sequence, tokens) of each piece
        if self._base is slots.engine.target._base:
            batches.append([(view.seq_id, len(tokens)) for view, tokens, _ in pieces])
        return decode(self, pieces)

    monkeypatch.setattr(LlamaModel, "decode_batch", recorded)
    slots = open_slots(tiny_pair, 2)
    try:
        prompt = slots.engine.target.tokenize(PROMPTS[0])
        long_prompt = slots.engine.target.tokenize(" ".join(["the king said a b c d e"] * 90))[:3 * PIECE + 10]
        params = PLAIN

        def no_eos(ids, scores):  # a pure processor: every stream runs to its max_tokens
            scores = scores.copy()
            scores[EOS] = -np.inf
            return scores

        def steps(tokens, seed, n):
            def make():
                engine = slots.engine_here()
                rng = np.random.default_rng(seed)
                return (s.tokens for s in engine.steps(tokens, params=params, draft_max=3, max_tokens=n, rng=rng,
                                                       processor=no_eos))
            return make

        running = slots.run(steps(prompt, 1, 400), prompt)
        first = next(running)
        joined = slots.run(steps(long_prompt, 2, 4), long_prompt)
        out = next(joined)
        rest = [first, *running]
        assert sum(len(t) for t in rest) == 400 and len(out) >= 1
        # the newcomer's prompt went in pieces of at most PIECE tokens, each beside a pass of the running stream
        newcomer = next(s for b in batches for s, n in b if n > PIECE // 2)
        loading = [b for b in batches if any(s == newcomer and n > 8 for s, n in b)]
        assert len(loading) >= 3 and all(n <= PIECE for b in loading for _, n in b)
        assert all(len(b) == 2 for b in loading)  # the running stream had its rows in every one
    finally:
        slots.close()


def _two_token_counts_in_slots(slots, bins, n_runs, params, rule="token"):
    """The first two tokens of ``n_runs`` runs of PROMPT, four at once beside as many runs of another prompt
    (their rows share the batches; not counted), each run with its own random stream."""
    prompt = slots.engine.target.tokenize(PROMPT)
    other = slots.engine.target.tokenize(PROMPTS[2])
    counts = np.zeros(len(bins.likely) * bins.n_vocab + 2, dtype=np.int64)

    def make(tokens, seed):
        def run():
            rng = np.random.default_rng([7, seed])
            yield first_two_tokens(slots.engine_here(), tokens, rng, params=params, processor=None, rule=rule,
                                   adaptive=False)
        return run

    jobs = []
    for i in range(n_runs):
        jobs.append(slots.run(make(prompt, i), prompt))
        slots.run(make(other, n_runs + i), other)  # a batchmate
    for job in jobs:
        counts[bins.index(*next(job))] += 1
    return counts


@pytest.mark.slow  # the exactness check's 3,000 runs again, in parallel slots (one sequence: test_engine_llama.py)
@pytest.mark.parametrize("rule", ["token", "block"])
def test_the_joint_law_of_each_slots_first_two_tokens_is_the_targets(tiny_pair, rule):
    """4 slots; the counted runs share every batch with runs of another prompt. N = 3,000: detects w >= 0.201
    (power 0.99 at ALPHA 1e-4; the bound is asserted), as the one-sequence check of test_engine_llama.py."""
    solo = open_tiny_engine(tiny_pair)
    try:
        bins, expected = two_token_law(solo, PLAIN, None, N_RUNS)
    finally:
        solo.close()
    assert detectable(expected, N_RUNS) <= 0.201
    slots = open_slots(tiny_pair, 4)
    try:
        counts = _two_token_counts_in_slots(slots, bins, N_RUNS, PLAIN, rule)
    finally:
        slots.close()
    assert_distributed_as(counts, expected)


@pytest.mark.slow  # the exactness check's 3,000 runs again, in parallel slots (one sequence: test_engine_llama.py)
def test_the_law_check_catches_two_slots_rows_swapped(tiny_pair, monkeypatch):
    """A planted bug: in each batch of several sequences, the first and the last sequence's first logits rows
    swapped. The same check fails."""
    solo = open_tiny_engine(tiny_pair)
    try:
        bins, expected = two_token_law(solo, PLAIN, None, N_RUNS)
    finally:
        solo.close()
    decode = LlamaModel.decode_batch

    def swapped(self, pieces):
        out = decode(self, pieces)
        if len(out) > 1 and all(isinstance(o, np.ndarray) and len(o) for o in (out[0], out[-1])):
            first, last = out[0][0].copy(), out[-1][0].copy()
            out[0], out[-1] = out[0].copy(), out[-1].copy()
            out[0][0], out[-1][0] = last, first
        return out

    monkeypatch.setattr(LlamaModel, "decode_batch", swapped)
    slots = open_slots(tiny_pair, 4)
    try:
        counts = _two_token_counts_in_slots(slots, bins, N_RUNS, PLAIN)
    finally:
        slots.close()
    with pytest.raises(AssertionError):
        assert_distributed_as(counts, expected)


def test_a_new_generation_keeps_only_the_cache_it_reuses(tiny_pair):
    """Every pass attends over the cells all slots hold, so idle slots' caches go when a generation starts,
    except the one the new prompt shares the longest prefix with (as one slot keeps its one cache)."""
    t, d = tiny_pair
    with SpeculativeLlama(t, d, n_ctx=1024, n_threads=1, n_parallel=3) as par:
        streams = [par.create_completion(p, max_tokens=12, temperature=0, stream=True) for p in PROMPTS[:3]]
        for s in streams:
            next(s)  # all three run at once, in three slots
        for s in streams:
            list(s)
        held = [len(s.engine.target.tokens) for s in par.slots._slots]
        assert all(n > 0 for n in held)
        again = par.create_completion(PROMPTS[1] + " and", max_tokens=4, temperature=0)
        assert again["choices"][0]["finish_reason"] == "length"
        after = [len(s.engine.target.tokens) for s in par.slots._slots]
        assert sum(n > 0 for n in after) == 1  # the slot it took, which held PROMPTS[1]
        kept = next(s for s in par.slots._slots if s.engine.target.tokens)
        assert par.slots.engine.target.free_cells() == 1024 - len(kept.engine.target.tokens)
        assert kept.engine.target.tokens[:len(par.tokenize(PROMPTS[1]))] == par.tokenize(PROMPTS[1])


def test_a_request_waits_for_an_ending_slot_that_holds_much_more_of_its_prompt(tiny_pair):
    """A prompt load stopped after its first piece (as a server stops a superseded warm-up) ends after the piece it
    is in; a request for the same prompt that arrives meanwhile waits for that slot, which holds at least the first
    piece (one PREFILL_PIECE more than the empty one), rather than take the empty one."""
    t, d = tiny_pair
    with SpeculativeLlama(t, d, n_ctx=8192, n_threads=1, n_parallel=2) as par:
        prompt = par.tokenize(b"once upon a time there lived a king" * 400)[:4000]  # 16 pieces
        loading = par.prefill(prompt)
        assert next(loading)["n_evaluated"] == 256
        loading.close()  # the loading slot stops after the piece it is in
        out = par.create_completion(prompt, max_tokens=2, temperature=0, timings=True)
        assert out["timings"]["prompt_n"] <= len(prompt) - 1 - 256  # it reused what the load left
