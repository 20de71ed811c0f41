"""Structured output under exact speculation, end to end on the tiny GGUF pair.

A small grammar over real token ids of the tiny vocabulary (a
:class:`~specllama.constraint.TokenTableConstraint`):

    "the" (queen | cat) (went | ran | came | saw) "to" "the" (house | night | little) [EOG | "and"]

The end of generation is allowed only after the place (where the grammar
accepts), and after "and" the grammar is complete (it stops with "stop", no
pass). "the" at the start and "to the" are forced runs. The prompt repeats
phrases of this shape, so prompt lookup proposes both legal and illegal
tokens.

The law the engine promises is target-only decoding with local masking; it
is computed exactly from the target's own rows (each masked to the grammar's
tokens, then the sampling transforms) for every sequence the grammar allows,
and the engine's emitted sequences are checked against it by chi-square
(fixed seeds, ALPHA = 1e-4, bounds computed; the power statement of each
test names the smallest bias detected, as Cohen's w at power 0.99). Every
other sequence has probability 0 and fails the check on sight.
"""

from __future__ import annotations

import numpy as np
import pytest

from specllama.constraint import TokenTableConstraint
from specllama.drafters import PROMPT_LOOKUP
from specllama.engine import SpeculativeEngine
from specllama.sampling import SamplingParams, to_probs

from .stats_helpers import assert_distributed_as, detectable_effect, pooled_bins

PROMPT = "the king went to the house and the queen ran to the tree and the dog came to the"
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
GREEDY = SamplingParams(temperature=0)
N_RUNS = 1000
MAX_TOKENS = 16  # more than the grammar's longest sentence (8 tokens): every run ends with "stop"
K = 3

#: the grammar's states, word -> next state (the words are single tokens of the tiny vocabulary)
SENTENCE = {
    0: {"the": 1},
    1: {"queen": 2, "cat": 2},
    2: {"went": 3, "ran": 3, "came": 3, "saw": 3},
    3: {"to": 4},
    4: {"the": 5},
    5: {"house": 6, "night": 6, "little": 6},
    6: {"and": 7},
    7: {},
}
SENTENCE_ACCEPTING = {6, 7}


def token_id(model, word: str) -> int:
    ids = model.tokenize(word, add_bos=False)
    assert len(ids) == 1, (word, ids)  # "▁word" is one piece of the tiny vocabulary
    return ids[0]


class Grammar:
    """A word grammar over one model's token ids: fresh constraints, and every
    sentence it allows."""

    def __init__(self, model, words: dict[int, dict[str, int]], accepting: set[int]) -> None:
        self.table = {s: {token_id(model, w): nxt for w, nxt in row.items()} for s, row in words.items()}
        self.accepting, self.n_vocab, self.eog = accepting, model.n_vocab, model.eog_tokens()

    def constraint(self) -> TokenTableConstraint:
        return TokenTableConstraint(self.table, self.accepting, self.n_vocab, self.eog)

    def sentences(self) -> list[tuple[int, ...]]:
        """Every emitted sequence a finished run can have (EOG not included)."""
        out: list[tuple[int, ...]] = []

        def walk(state: int, seq: tuple[int, ...]) -> None:
            if state in self.accepting:
                out.append(seq)
            for t, nxt in self.table[state].items():
                walk(nxt, seq + (t,))

        walk(0, ())
        return out


@pytest.fixture
def engine(fresh_engine):
    return fresh_engine


@pytest.fixture
def sentence(fresh_engine):
    return Grammar(fresh_engine.target, SENTENCE, SENTENCE_ACCEPTING)


def masked_law(target, prompt: list[int], grammar: Grammar, params: SamplingParams) -> np.ndarray:
    """The law of target-only decoding with local masking over ``grammar.sentences()``:
    at each position the target's row (a fresh evaluation) masked to the grammar's
    tokens (EOG only where it accepts), then ``params``; a complete grammar ends."""
    eog = grammar.eog[0]
    law = []
    for seq in grammar.sentences():
        prob, state = 1.0, 0
        for i in range(len(seq) + 1):
            t = seq[i] if i < len(seq) else eog  # a finished sentence ends with EOG ...
            if t == eog and not grammar.table[state]:
                break  # ... or is complete: the end is the only continuation (masked p = 1 on EOG)
            allowed = np.zeros(grammar.n_vocab, dtype=bool)
            allowed[list(grammar.table[state])] = True
            allowed[grammar.eog] = state in grammar.accepting
            target.rewind(0)
            row = target.eval(prompt + list(seq[:i]), n_logits=1)[0]
            prob *= to_probs(np.where(allowed, row, -np.inf), params)[t]
            if t != eog:
                state = grammar.table[state][t]
        law.append(prob)
    return np.array(law + [0.0])  # the last bin: any other outcome


def run(engine, prompt: list[int], constraint, rng, *, params=PLAIN, draft_max=K, rule="token",
        forced_drafts=True) -> tuple[list[int], list]:
    """One generation under ``constraint``: (emitted tokens, steps)."""
    steps = list(engine.steps(prompt, params=params, draft_max=draft_max, max_tokens=MAX_TOKENS, rng=rng,
                              adaptive=False, rule=rule, constraint=constraint, forced_drafts=forced_drafts))
    return [t for s in steps for t in s.tokens], steps


def counts_of(engine, grammar: Grammar, n_runs: int, seed: int, make_constraint=None, **kw) -> tuple[np.ndarray, dict]:
    """Counts over the grammar's sentences (the last bin: anything else), and pass statistics."""
    prompt = engine.target.tokenize(PROMPT)
    index = {s: i for i, s in enumerate(grammar.sentences())}
    counts = np.zeros(len(index) + 1, dtype=np.int64)
    rng = np.random.default_rng(seed)
    stats = dict(passes=0, drafted=0, accepted=0, forced=0, rejected=0)
    for _ in range(n_runs):
        constraint = grammar.constraint() if make_constraint is None else make_constraint(grammar.constraint())
        tokens, steps = run(engine, prompt, constraint, rng, **kw)
        ok = steps[-1].finish_reason == "stop"
        counts[index.get(tuple(tokens), len(index)) if ok else len(index)] += 1
        for s in steps:
            stats["passes"] += s.target_logits is not None
            stats["drafted"] += s.n_drafted
            stats["accepted"] += s.n_accepted
            stats["forced"] += s.n_forced
            stats["rejected"] += s.n_accepted < s.n_drafted
    return counts, stats


def detectable(expected: np.ndarray, n: int) -> float:
    """The smallest w the check on these (pooled) bins detects at n with power 0.99."""
    return detectable_effect(n, len(pooled_bins(expected, n)) - 1)


def expected_law(engine, grammar, n_runs=N_RUNS, w_bound=None) -> np.ndarray:
    expected = masked_law(engine.target, engine.target.tokenize(PROMPT), grammar, PLAIN)
    assert expected.sum() == pytest.approx(1.0, abs=1e-9)
    assert (expected[:-1] > 0.01).sum() >= 10  # real choices
    if w_bound is not None:
        assert detectable(expected, n_runs) <= w_bound  # the power the docstrings claim
    return expected


# -- the law ------------------------------------------------------------------------------


def test_target_only_decoding_follows_the_masked_law(engine, sentence):
    """The reference itself: target-only decoding (draft_max = 0) under the
    grammar follows the locally masked law computed from the target's rows.
    N = 1,000 on 16 pooled bins (of 48 sentences): detects w >= 0.254 with power 0.99."""
    expected = expected_law(engine, sentence, w_bound=0.254)
    counts, stats = counts_of(engine, sentence, N_RUNS, seed=11, draft_max=0)
    assert_distributed_as(counts, expected)
    assert stats["drafted"] == 0


SPECULATIVE = [
    pytest.param("model", "token", True, id="model-token-forced"),
    pytest.param("model", "token", False, id="model-token-no_forced"),
    pytest.param("model", "block", True, id="model-block-forced"),
    pytest.param("model", "block", False, id="model-block-no_forced"),
    pytest.param(PROMPT_LOOKUP, "token", True, id="lookup-forced"),
    pytest.param(PROMPT_LOOKUP, "token", False, id="lookup-no_forced"),
]


def drafting_engine(engine, drafter: str) -> SpeculativeEngine:
    # prompt lookup on the same target (not closed here: the fixture closes the target)
    return engine if drafter == "model" else SpeculativeEngine(engine.target, PROMPT_LOOKUP)


@pytest.mark.parametrize("drafter, rule, forced_drafts", SPECULATIVE)
def test_speculative_decoding_follows_the_masked_law(engine, sentence, drafter, rule, forced_drafts):
    """Speculative decoding under the grammar (k = 3 fixed; the draft model
    with both rules, forced runs drafted one-hot or not; prompt lookup, whose
    illegal drafts stay as the last draft) has the law of target-only masked
    decoding. N = 1,000 on 16 pooled bins (of 48 sentences): detects w >= 0.254 with power 0.99."""
    expected = expected_law(engine, sentence, w_bound=0.254)
    counts, stats = counts_of(drafting_engine(engine, drafter), sentence, N_RUNS, seed=12, rule=rule,
                              forced_drafts=forced_drafts)
    assert_distributed_as(counts, expected)
    # the case is one where drafts are made, kept and rejected, and forced runs drafted as asked
    assert 0 < stats["accepted"] < stats["drafted"] and stats["rejected"] > N_RUNS // 10
    assert (stats["forced"] > N_RUNS) == forced_drafts
    assert stats["passes"] < 8 * N_RUNS  # fewer passes than tokens


# -- planted bugs -------------------------------------------------------------------------


class _Wrapper:
    """Passes every call to a real constraint."""

    def __init__(self, inner: TokenTableConstraint) -> None:
        self.inner = inner
        self.draft: list[int] = []

    def allowed(self, path):
        return self.inner.allowed(path)

    def legal_prefix(self, path):
        self.draft = list(path)  # the engine checks each pass's whole draft here, before the target's rows
        return self.inner.legal_prefix(path)

    def forced(self):
        return self.inner.forced()

    def commit(self, tokens):
        self.inner.commit(tokens)
        self.draft = []

    @property
    def done(self):
        return self.inner.done

    def _lenient_commit(self, tokens) -> None:
        self.inner.commit(list(tokens)[: self.inner.legal_prefix(tokens)])


class AdvancedByDrafts(_Wrapper):
    """Planted: the grammar consumes the whole draft path and is never rolled
    back; after a rejection it has eaten the rejected drafts, then it eats
    the token the target sampled after the accepted ones (where legal)."""

    def commit(self, tokens):
        draft, self.draft = self.draft, []
        n = 0
        while n < min(len(tokens), len(draft)) and tokens[n] == draft[n]:
            n += 1
        self._lenient_commit(draft)
        self._lenient_commit(tokens[n:])


class UnmaskedBonus(_Wrapper):
    """Planted: no mask (None) for the bonus row, the target row after all
    of a pass's drafts (asked for after the engine checked the draft)."""

    def allowed(self, path):
        if self.draft and len(path) == len(self.draft):
            return None
        return self.inner.allowed(path)

    def commit(self, tokens):
        self.draft = []
        self._lenient_commit(tokens)


@pytest.mark.parametrize("bug", [AdvancedByDrafts, UnmaskedBonus], ids=["advanced_by_drafts", "unmasked_bonus"])
@pytest.mark.parametrize("drafter", ["model", PROMPT_LOOKUP], ids=["model", "lookup"])
def test_planted_bugs_fail_the_check(engine, sentence, bug, drafter):
    """The same check, same N and seed, fails an engine whose grammar was
    advanced by rejected drafts, and one whose bonus row is not masked."""
    expected = expected_law(engine, sentence)
    counts, _ = counts_of(drafting_engine(engine, drafter), sentence, N_RUNS, seed=12, make_constraint=bug)
    with pytest.raises(AssertionError, match="chi2|p = 0"):
        assert_distributed_as(counts, expected)


def test_the_wrapper_alone_changes_nothing(engine, sentence):
    """The planted wrappers' plumbing (without their bug) passes the check:
    what fails above is the bug. N = 1,000: w >= 0.254, as above."""
    expected = expected_law(engine, sentence)
    counts, _ = counts_of(engine, sentence, N_RUNS, seed=12, make_constraint=_Wrapper)
    assert_distributed_as(counts, expected)


# -- ends and greedy decoding ----------------------------------------------------------


def test_an_accepted_drafted_end_of_generation_ends_the_run(engine, sentence):
    """The draft model drafts EOG where the grammar accepts (after the place)
    and stops there; the target accepts it, and the pass still samples a
    bonus token after it (new tokens [..., EOG, bonus]). The run ends with
    "stop" at that EOG, and the grammar is advanced by the emitted tokens
    only: never by the EOG or the bonus token after it (the table grammar
    refuses both). Greedy, so the case is pinned: the last pass kept all its
    drafts, the EOG among them, and emitted one token fewer than it kept."""
    prompt = engine.target.tokenize(PROMPT)
    tokens, steps = run(engine, prompt, sentence.constraint(), np.random.default_rng(0), params=GREEDY,
                        forced_drafts=False)
    last = steps[-1]
    assert last.finish_reason == "stop" and last.eog_token == engine.target.eos
    assert last.n_drafted >= 1 and last.n_accepted == last.n_drafted and len(last.tokens) == last.n_accepted - 1
    assert tuple(tokens) in set(sentence.sentences())


#: a grammar that never accepts before it is complete: "the" (queen | cat) (went | ran), then only the end
SHORT = {0: {"the": 1}, 1: {"queen": 2, "cat": 2}, 2: {"went": 3, "ran": 3}, 3: {}}


@pytest.mark.parametrize("draft_max", [0, K], ids=["target_only", "speculative"])
def test_a_complete_grammar_stops_without_another_pass(engine, draft_max, monkeypatch):
    """When the grammar is complete, generation ends with "stop" and no target
    pass is spent on the end: every pass emits a token. Target-only: one pass
    per token (3), then a Step without a pass (no tokens, no logits, no EOG
    token). Speculative: the end comes either so, or free from the bonus row
    of the pass that completed the grammar (masked to EOG alone)."""
    grammar = Grammar(engine.target, SHORT, {3})
    prompt = engine.target.tokenize(PROMPT)
    target_eval = engine.target.eval
    passes = []

    def counting_eval(tokens, *, n_logits=1, copy=True):
        passes.append(n_logits)
        return target_eval(tokens, n_logits=n_logits, copy=copy)

    monkeypatch.setattr(engine.target, "eval", counting_eval)
    rng = np.random.default_rng(5)
    ends = set()
    for _ in range(40):
        passes.clear()
        tokens, steps = run(engine, prompt, grammar.constraint(), rng, draft_max=draft_max)
        assert tuple(tokens) in set(grammar.sentences()) and steps[-1].finish_reason == "stop"
        with_pass = [s for s in steps if s.target_logits is not None]
        assert sum(n > 0 for n in passes) == len(with_pass)  # (the prefill evaluates without logits)
        assert all(s.tokens for s in with_pass)  # no pass for the end alone
        last = steps[-1]
        if last.target_logits is None:
            assert last.tokens == [] and last.eog_token is None and last.n_drafted == 0
            ends.add("no pass")
        else:
            assert last.eog_token == engine.target.eos
            ends.add("bonus")
        if draft_max == 0:
            assert len(with_pass) == 3 and len(steps) == 4
    assert ends == ({"no pass"} if draft_max == 0 else {"no pass", "bonus"})


GREEDY_PROMPTS = [PROMPT, "once upon a time there lived a king", "the cat"]


@pytest.mark.parametrize("drafter, rule, forced_drafts", SPECULATIVE)
def test_greedy_speculative_equals_greedy_target_only(engine, sentence, drafter, rule, forced_drafts):
    """At temperature 0 under the grammar, speculative decoding emits exactly
    target-only decoding's tokens (and finish reason), prompt by prompt."""
    spec = drafting_engine(engine, drafter)
    for text in GREEDY_PROMPTS:
        prompt = engine.target.tokenize(text)
        rng = np.random.default_rng(0)
        expected, ref_steps = run(engine, prompt, sentence.constraint(), rng, params=GREEDY, draft_max=0)
        got, steps = run(spec, prompt, sentence.constraint(), rng, params=GREEDY, rule=rule,
                         forced_drafts=forced_drafts)
        assert got == expected and steps[-1].finish_reason == ref_steps[-1].finish_reason == "stop"
        assert tuple(got) in set(sentence.sentences())


# -- a lazy trigger (the shape of tool calls: free text until a trigger, then a held call) --------------

#: free text of at most two words, or a call: the trigger is "to" "the" (two tokens: "to" followed by
#: anything else is text again), after which the call's body must follow ("house"/"night"/"little", then
#: the forced "and"). A reply may end after free text or after a complete call, never inside one.
LAZY = {
    0: {"the": 1, "queen": 1, "to": 10},
    1: {"cat": 2, "ran": 2, "to": 11},
    2: {"to": 12},
    10: {"the": 20, "saw": 1},
    11: {"the": 20, "saw": 2},
    12: {"the": 20},
    20: {"house": 21, "night": 21, "little": 21},
    21: {"and": 22},
    22: {},
}
LAZY_ACCEPTING = {1, 2, 22}


@pytest.mark.parametrize("drafter, rule, forced_drafts", [SPECULATIVE[0], SPECULATIVE[3], SPECULATIVE[4]])
def test_a_lazy_trigger_keeps_the_law(engine, drafter, rule, forced_drafts):
    """Speculative decoding under a lazy trigger split across two tokens
    (drafts complete it and are rejected, or start it and go on as text) has
    the law of target-only masked decoding: the trigger's state is the
    grammar's, rolled back with it. N = 1,000: detects w >= 0.25 with power 0.99."""
    lazy = Grammar(engine.target, LAZY, LAZY_ACCEPTING)
    expected = masked_law(engine.target, engine.target.tokenize(PROMPT), lazy, PLAIN)
    assert expected.sum() == pytest.approx(1.0, abs=1e-9) and detectable(expected, N_RUNS) <= 0.25
    assert sum(expected[i] for i, s in enumerate(lazy.sentences()) if len(s) > 4) > 0.05  # calls are made
    counts, stats = counts_of(drafting_engine(engine, drafter), lazy, N_RUNS, seed=13, rule=rule,
                              forced_drafts=forced_drafts)
    assert_distributed_as(counts, expected)
    assert 0 < stats["accepted"] < stats["drafted"]


def test_a_trigger_advanced_by_rejected_drafts_fails_the_check(engine):
    """The same check fails when the grammar (and so the trigger) is advanced
    by every draft, rejected ones included."""
    lazy = Grammar(engine.target, LAZY, LAZY_ACCEPTING)
    expected = masked_law(engine.target, engine.target.tokenize(PROMPT), lazy, PLAIN)
    counts, _ = counts_of(engine, lazy, N_RUNS, seed=13, make_constraint=AdvancedByDrafts)
    with pytest.raises(AssertionError, match="chi2|p = 0"):
        assert_distributed_as(counts, expected)
