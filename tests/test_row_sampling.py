"""The top-k shortcut of issue 48 against the sampler as it was (tests/sampling_reference.py,
e00939f's ``sparse_probs`` verbatim): the same token ids and the same float64 probabilities,
bit for bit, on random rows with ties, top-p's edges, min-p, penalties, a logit bias, grammar
masks, infill and temperature 0, at vocabulary sizes that take each of its ways."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specllama import sampling
from specllama.processors import chain, logit_bias, penalties
from specllama.sampling import InfillVocab, SamplingParams, sparse_probs

from . import sampling_reference

DEFAULT = SamplingParams()
# 64 * 4096: the grid's way, as Gemma's 262,144; 64 * 300: a small grid; 5003 and 20001: the windows' way
VOCABS = (64 * 4096, 64 * 300, 5003, 20001)


def assert_same_law(row: np.ndarray, params: SamplingParams) -> None:
    """sparse_probs gives what the old sampler gives, or raises what it raises."""
    try:
        want = sampling_reference.sparse_probs(row, params)
    except ValueError as e:
        with pytest.raises(ValueError, match=str(e).split(";")[0]):
            sparse_probs(row, params)
        return
    got = sparse_probs(row, params)
    assert got.ids.dtype == want.ids.dtype
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.probs, want.probs)  # exact: the same floats, not merely close


def _rows(rng: np.random.Generator, n_vocab: int):
    """Rows of the kinds a target or draft gives, and the awkward ones."""
    spread = float(rng.choice([1.0, 2.5, 4.0]))
    x = rng.standard_normal(n_vocab) * spread
    x[rng.integers(0, n_vocab, 3)] += rng.uniform(2, 25, 3)  # a few likely tokens, peaked or not
    yield "plain", x.astype(np.float32)
    yield "float64", x
    yield "ties", (np.round(x * 2) / 2).astype(np.float32)  # equal logits everywhere, the k-th and top-p's cut too
    tied = x.astype(np.float32)
    ranked = np.argsort(-tied, kind="stable")
    for rank in (1, 5, 40, 200):  # the rank-th and (rank+1)-th logits equal: a tie at each top_k below
        tied[ranked[rank]] = tied[ranked[rank - 1]]
    yield "tie at the k-th", tied
    yield "coarse ties", np.round(x).astype(np.float32)
    masked = np.full(n_vocab, -np.inf, dtype=np.float32)
    for n_allowed in (1, 7, 40, 41, 300):  # a grammar's mask: fewer, as many and more tokens than top_k
        allowed = rng.choice(n_vocab, size=n_allowed, replace=False)
        row = masked.copy()
        row[allowed] = x[allowed]
        yield f"mask {n_allowed}", row
    far = x.astype(np.float32)
    far[rng.integers(0, n_vocab)] = far.max() + 200  # one token beyond every window
    yield "far best", far
    ids = rng.integers(0, n_vocab, 80)
    processor = chain([penalties(repeat_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.2),
                       logit_bias({int(ids[0]): 30.0, int(ids[1]): -100.0, int(ids[2]): 5.0})])
    yield "penalties and bias", processor(ids.astype(np.intc), x.astype(np.float32))


PARAMS = [
    DEFAULT,
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=1.5, top_k=40, top_p=0.5, min_p=0.0),
    SamplingParams(temperature=0.5, top_k=5, top_p=0.0, min_p=0.05),  # top_p = 0: the argmax alone
    SamplingParams(temperature=1.0, top_k=1, top_p=0.9, min_p=0.3),
    SamplingParams(temperature=0.8, top_k=200, top_p=0.999, min_p=0.0),
    SamplingParams(temperature=0.8, top_k=40, top_p=1.0, min_p=0.05),  # top-p off: the old way
    SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.05),
]


@pytest.mark.parametrize("n_vocab", VOCABS)
def test_the_same_law_as_the_old_sampler(n_vocab):
    rng = np.random.default_rng(n_vocab)
    for _ in range(2):
        for _kind, row in _rows(rng, n_vocab):
            for params in PARAMS:
                assert_same_law(row, params)


def test_the_same_law_on_the_demo_targets_size_at_many_spreads():
    """Gemma's 262,144 tokens, the default settings: peaked rows (few tokens within the first
    window), flat ones (thousands), and rows quantised so that ties decide."""
    rng = np.random.default_rng(48)
    for i in range(60):
        x = rng.standard_normal(64 * 4096) * rng.uniform(0.5, 6)
        x[rng.integers(0, x.shape[0], 5)] += rng.uniform(0, 40, 5)
        if i % 3 == 2:
            x = np.round(x * 4) / 4
        assert_same_law(x.astype(np.float32), DEFAULT)


def test_non_finite_rows_raise_or_sample_as_before():
    for n_vocab in (64 * 4096, 5003):
        row = np.zeros(n_vocab, dtype=np.float32)
        for value, where in ((np.nan, 17), (np.nan, n_vocab - 1), (np.inf, 3)):
            bad = row.copy()
            bad[where] = value
            for params in PARAMS:
                assert_same_law(bad, params)
        for params in PARAMS:
            assert_same_law(np.full(n_vocab, -np.inf, dtype=np.float32), params)


def test_infill_rows():
    pieces = [b"a", b"ab", b"abc", b"b", b"", b"c", b"cd"] * 2925 + [b"x"] * (64 * 300 - 7 * 2925)
    infill = InfillVocab(pieces, frozenset({4, 11}), 4)
    rng = np.random.default_rng(5)
    for i in range(20):
        x = (rng.standard_normal(64 * 300) * 3).astype(np.float32)
        if i % 2:
            x = np.round(x)  # equal probabilities: infill's order decides, the old way's
        assert_same_law(x, SamplingParams(temperature=0.9, top_k=30, top_p=0.95, min_p=0.0, infill=infill))


def test_the_shortcut_is_the_way_taken(monkeypatch):
    """Not a vacuous comparison: on rows without ties the shortcut decides every row, on the
    grid and through the windows; with ties at the k-th logit or at top-p's cut it leaves the
    row to the old way, whose order decides which of the equal tokens stay."""
    old_way = []
    monkeypatch.setattr(sampling, "_candidates", lambda *a: old_way.append(1) or sampling_reference._candidates(*a))
    rng = np.random.default_rng(3)
    for n_vocab in VOCABS:
        for _ in range(10):
            x = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
            assert_same_law(x, DEFAULT)
    assert not old_way
    tie_at_k = np.linspace(10, 0, 64 * 300).astype(np.float32)
    tie_at_k[39:41] = tie_at_k[39]  # the 40th and 41st logits equal
    assert sampling._sparse_probs_top_k(tie_at_k, DEFAULT) is None
    tie_at_cut = np.linspace(-50, -60, 64 * 300).astype(np.float32)  # distinct logits far below
    tie_at_cut[[5, 900, 7000]] = [3.0, 0.0, 0.0]  # top-p 0.95 keeps the best and one of the two
    assert sampling._sparse_probs_top_k(tie_at_cut, DEFAULT) is None
    for row in (tie_at_k, tie_at_cut):
        assert_same_law(row, DEFAULT)
    assert len(old_way) == 2
    equal_probs = np.linspace(-40, -60, 64 * 300).astype(np.float32)
    equal_probs[[0, 1, 2, 3, 4, 5]] = [5.0, 5.0, 4.0, 4.0, 3.5, 3.0]  # kept whole by top-p, two pairs equal
    infill = InfillVocab([b"a", b"ab", b"c", b"cd", b"e", b"f"] + [b"x"] * (64 * 300 - 6), frozenset({5}), 5)
    params = SamplingParams(temperature=1.0, top_k=30, top_p=0.999999, min_p=0.0, infill=infill)
    assert sampling._sparse_probs_top_k(equal_probs, params) is None
    assert sampling._sparse_probs_top_k(equal_probs, dataclasses.replace(params, infill=None)) is not None
    assert_same_law(equal_probs, params)


def test_sparse_probs_or_none_is_the_drafters_old_check():
    """None exactly where ``np.isfinite(row).any()`` is false (the drafter then stops); else
    what sparse_probs gives, or its error (a NaN among finite logits)."""
    for n_vocab in (64 * 300, 5003):
        finite = np.zeros(n_vocab, dtype=np.float32)
        finite[7] = 2.0
        nothing = np.full(n_vocab, -np.inf, dtype=np.float32)
        nan_only = np.where(np.arange(n_vocab) % 2 == 0, np.nan, -np.inf).astype(np.float32)
        inf_only = nothing.copy()
        inf_only[[3, 9]] = np.inf
        inf_and_finite = finite.copy()
        inf_and_finite[[3, 9]] = np.inf
        nan_and_finite = finite.copy()
        nan_and_finite[5] = np.nan
        for params in PARAMS:
            for row in (nothing, nan_only, inf_only):
                assert sampling.sparse_probs_or_none(row, params) is None
            for row in (finite, inf_and_finite):
                got, want = sampling.sparse_probs_or_none(row, params), sampling_reference.sparse_probs(row, params)
                np.testing.assert_array_equal(got.ids, want.ids)
                np.testing.assert_array_equal(got.probs, want.probs)
            with pytest.raises(ValueError, match="NaN"):
                sampling.sparse_probs_or_none(nan_and_finite, params)
