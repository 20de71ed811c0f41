"""The engine on real llama.cpp, with the tiny models the suite writes."""

from __future__ import annotations

import numpy as np
import pytest

from specllama.backend import LlamaModel
from specllama.engine import SpeculativeEngine
from specllama.errors import SpecLlamaError
from specllama.generate import generate
from specllama.sampling import SamplingParams, to_probs

from .conftest import TINY_CTX
from .stats_helpers import assert_distributed_as

PROMPT = "once upon a time there lived a king"
GREEDY = SamplingParams(temperature=0)
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def test_acceptance_is_strictly_between_zero_and_one(tiny_engine):
    r = generate(tiny_engine, PROMPT, params=SamplingParams(temperature=1.0, seed=0), draft_max=4, max_tokens=96,
                 adaptive=False)
    assert 0 < r.stats.n_accepted < r.stats.n_drafted


class PastDependentPolicy:
    """Chooses each pass's draft length from the previous pass's outcome (one
    more than it kept, or none after a full rejection): a rule as dependent
    on past acceptance as any adaptive one, to show such rules cannot bias
    the output."""

    def __init__(self) -> None:
        self.last_accepted = 2

    def choose(self, cap: int, *, minimum: int = 0) -> int:
        return min(cap, self.last_accepted + 1 if self.last_accepted else 0) if cap else 0

    def observe(self, n_drafted, n_accepted, draft_seconds, verify_seconds) -> None:
        self.last_accepted = n_accepted if n_drafted else 2


POLICIES = {"fixed": None, "adaptive": "real", "past-dependent": PastDependentPolicy}


def use_policy(engine, monkeypatch, name) -> bool:
    """Install the named policy; return the ``adaptive`` flag to pass."""
    if POLICIES[name] is PastDependentPolicy:
        monkeypatch.setattr(engine, "policy", PastDependentPolicy())
    return POLICIES[name] is not None


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_speculative_equals_target_only(tiny_engine, k, policy, monkeypatch):
    adaptive = use_policy(tiny_engine, monkeypatch, policy)
    baseline = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=64)
    spec = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=k, max_tokens=64, adaptive=adaptive)
    assert len(baseline.tokens) == 64
    assert spec.tokens == baseline.tokens
    assert spec.text == baseline.text
    assert baseline.stats.n_target_passes == 64
    if policy != "adaptive":  # (the real policy may rightly decline to draft on models this small)
        # the draft was rejected somewhere, and kept somewhere: both paths ran
        assert 0 < spec.stats.n_accepted < spec.stats.n_drafted
        assert spec.stats.n_target_passes < 64


EOS = 2  # the tiny vocabulary's only end-of-generation token


def _first_two_tokens(engine, prompt_tokens, rng, draft_max, adaptive):
    """The first two tokens; after an EOS first token, (EOS, None)."""
    out: list[int] = []
    steps = engine.steps(prompt_tokens, params=PLAIN, draft_max=draft_max, max_tokens=3, rng=rng, adaptive=adaptive)
    for step in steps:
        out.extend(step.tokens)
        if step.finish_reason == "stop":
            out.append(EOS)
        if len(out) >= 2 or step.finish_reason:
            break
    steps.close()
    return out[0], (out[1] if out[0] != EOS else None)


def _two_token_counts(engine, adaptive, n_runs=3000, seed=2024):
    """Seeded runs' (first, second) tokens, binned, with the target's exact
    joint probabilities enumerated from its logits for the same bins."""
    target = engine.target
    prompt = target.tokenize(PROMPT)
    # p(t1) after the prompt, then p(t2 | t1) for every t1 the runs can meet
    target.rewind(0)
    p1 = to_probs(target.eval(prompt, n_logits=1)[0], PLAIN)
    likely = [int(t) for t in np.flatnonzero(p1 * n_runs >= 0.5) if t != EOS]
    joint = []
    for t1 in likely:
        target.rewind(len(prompt))
        p2 = to_probs(target.eval([t1], n_logits=1)[0], PLAIN)
        joint.append(p1[t1] * p2)
    v = target.n_vocab
    # bins: (t1, t2) for each likely t1; then "EOS first"; then "any other t1"
    expected = np.concatenate(joint + [[p1[EOS], 1.0 - p1[likely].sum() - p1[EOS]]])
    index = {t1: i for i, t1 in enumerate(likely)}
    counts = np.zeros(len(expected), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(n_runs):
        t1, t2 = _first_two_tokens(engine, prompt, rng, draft_max=3, adaptive=adaptive)
        counts[-2 if t1 == EOS else index[t1] * v + t2 if t1 in index else -1] += 1
    return counts, expected


@pytest.mark.parametrize("policy", list(POLICIES))
def test_two_token_distribution_matches_the_target(tiny_engine, policy, monkeypatch):
    """First and second tokens, jointly, against the target's exact
    distribution enumerated from its logits; with a fixed draft length, the
    adaptive policy, and a rule driven by past acceptance (k chosen from
    past passes must not bias them)."""
    adaptive = use_policy(tiny_engine, monkeypatch, policy)
    assert_distributed_as(*_two_token_counts(tiny_engine, adaptive))


def test_two_token_check_catches_a_biased_engine(tiny_engine, monkeypatch):
    """The same check fails an engine that keeps every draft token (so its
    output follows the draft model): the test above has the power to fail."""
    import specllama.engine as engine_module

    def keep_all(p_row, q_draft, draft_tokens, rng):
        return len(draft_tokens), p_row(len(draft_tokens)).sample(rng.random())

    monkeypatch.setattr(engine_module, "verify_sparse", keep_all)
    with pytest.raises(AssertionError, match="chi2"):
        assert_distributed_as(*_two_token_counts(tiny_engine, adaptive=False))


def test_caches_match_a_fresh_evaluation_after_rejections(tiny_engine, tiny_pair):
    engine = tiny_engine
    fresh_target = LlamaModel(tiny_pair[0], n_ctx=TINY_CTX)
    fresh_draft = LlamaModel(tiny_pair[1], n_ctx=TINY_CTX)
    prompt = engine.target.tokenize(PROMPT)
    for seed, n in [(1, 17), (2, 40), (3, 75)]:
        rng = np.random.default_rng(seed)
        emitted: list[int] = []
        n_rejections = 0
        for step in engine.steps(prompt, params=PLAIN, draft_max=5, max_tokens=n, rng=rng, adaptive=False):
            emitted.extend(step.tokens)
            n_rejections += step.n_accepted < step.n_drafted
        assert n_rejections > 0
        seq = prompt + emitted
        # the target holds everything but the newest token; the draft a prefix
        assert engine.target.tokens == seq[:-1]
        assert engine.draft.tokens == seq[: len(engine.draft.tokens)]
        for cached, fresh in [(engine.target, fresh_target), (engine.draft, fresh_draft)]:
            got = cached.eval(seq[len(cached.tokens):], n_logits=1)[0]
            fresh.rewind(0)
            want = fresh.eval(seq, n_logits=1)[0]
            np.testing.assert_allclose(got, want, atol=1e-3)
            # the comparison is sensitive: one wrong token in the history shows
            fresh.rewind(0)
            wrong = fresh.eval(seq[:-2] + [seq[-2] ^ 1] + seq[-1:], n_logits=1)[0]
            assert np.abs(wrong - want).max() > 0.05
    fresh_target.close()
    fresh_draft.close()


def test_foreign_vocabulary_is_refused(tiny_pair, foreign_draft):
    path, first_diff = foreign_draft
    target = LlamaModel(tiny_pair[0], n_ctx=64)
    draft = LlamaModel(path, n_ctx=64)
    with pytest.raises(SpecLlamaError) as info:
        SpeculativeEngine(target, draft)
    msg = str(info.value)
    assert tiny_pair[0] in msg and path in msg
    assert f"token {first_diff} is b'\\xe2\\x96\\x81kong' in the draft but b'\\xe2\\x96\\x81king' in the target" in msg
    target.close()
    draft.close()


def test_full_context_finishes_with_length(tiny_pair):
    n_ctx = 24
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=n_ctx), LlamaModel(tiny_pair[1], n_ctx=n_ctx))
    prompt = engine.target.tokenize(PROMPT)
    r = generate(engine, prompt, params=GREEDY, draft_max=4, max_tokens=None, adaptive=False)
    assert r.finish_reason == "length"
    # the context holds n_ctx tokens; the newest one need not be evaluated
    assert len(prompt) + len(r.tokens) == n_ctx + 1
    base = generate(engine, prompt, params=GREEDY, draft_max=0, max_tokens=None)
    assert base.tokens == r.tokens
    engine.close()


def test_prompt_longer_than_context_is_refused(tiny_pair):
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=8), None)
    with pytest.raises(SpecLlamaError, match=r"the prompt is 9 tokens but the context \(-c/--ctx-size\) holds 8"):
        generate(engine, "once upon a time there lived a king", params=GREEDY)
    engine.close()


def test_max_tokens_and_stop_strings(tiny_engine):
    r = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=4, max_tokens=7)
    assert (len(r.tokens), r.finish_reason) == (7, "length")
    full = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=4, max_tokens=64).text
    stop = full[10:13]
    cut = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=4, max_tokens=64, stop=[stop])
    assert cut.finish_reason == "stop"
    assert cut.text == full[: full.index(stop)]


def test_draft_never_reevaluates_the_prefix(tiny_engine, monkeypatch):
    """Every draft eval call gets only tokens its cache lacks: the prompt once,
    then at most two tokens (the newest, and a bonus-accepted draft)."""
    draft = tiny_engine.draft
    sizes: list[int] = []
    real_eval = draft.eval

    def counting_eval(tokens, *, n_logits=1, copy=True):
        sizes.append(len(tokens))
        return real_eval(tokens, n_logits=n_logits, copy=copy)

    monkeypatch.setattr(draft, "eval", counting_eval)
    draft.rewind(0)
    r = generate(tiny_engine, PROMPT, params=PLAIN, draft_max=4, max_tokens=48, rng=np.random.default_rng(9),
                 adaptive=False)
    n_prompt = len(tiny_engine.target.tokenize(PROMPT))
    assert sizes[0] == n_prompt - 1
    assert max(sizes[1:]) <= 2
    # one draft call per drafted token
    assert len(sizes) - 1 == r.stats.n_drafted
