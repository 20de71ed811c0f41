"""Structured output under exact speculation: the law, by exact enumeration.

The promise (issue 20): with a constraint, the output follows exactly
target-only decoding with *local masking*: at each position the target's row
is masked to the tokens the grammar allows after the tokens so far (end of
generation only where the grammar may end), then the filters and the
temperature, then sampling.

Here a small context-dependent table pair (test_block_verify's ``_logits``:
5 tokens, 4 the end of generation) runs under a grammar over token ids, the
real :class:`~specllama.constraint.TokenTableConstraint`. The speculative side
follows the engine's loop step by step (``SpeculativeEngine.steps``): a
complete grammar stops without a pass; the grammar's forced tokens are drafted
one-hot; otherwise the draft model drafts from its masked rows (stopping at an
end of generation, or where its row allows nothing), or prompt lookup drafts
one-hot tokens that may be illegal; a draft is cut just *after* its first
illegal token (``legal_prefix + 1``); the k+1 target rows are masked along the
draft path (no mask past an illegal token); token-wise or block verification
(test_block_verify's formulas, applied to every kind of draft); the grammar
advances by the emitted tokens only. Passes are enumerated to the end: every
draft, every coin, every pass until n tokens or the end, with the grammar's
state carried between passes, so a bug that only shows in a later pass
(a grammar state moved by rejected drafts) shows here.

The law of the emitted sequences then equals the locally masked target-only
law to 1e-12, for both rules, k = 1..3, both sampling setups, forced drafts on
and off. The known bug classes, planted in the same enumeration, move the law
by more than 1e-3: the grammar advanced by a rejected draft, an unmasked
bonus row, and a draft cut *before* an illegal token with a bonus token drawn
instead (with an unmasked q).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pytest

from specllama.constraint import TokenTableConstraint
from specllama.drafters import PromptLookupDrafter
from specllama.sampling import SamplingParams, to_probs

from .block_law import EOG, EXACT, FILTERED, PLAIN, Law, V, _logits, assert_same_law, block_law, tokenwise_law

#: the draft model lacks token 3 (a draft vocabulary shorter than the target's): where the
#: grammar allows only 3, the draft's masked row allows nothing and drafting stops there
LACKS = 3

#: the grammar, state -> {token: next state}. 0: the start. 1 -> 3 -> 5: a forced run (3 then 0;
#: the draft cannot propose 3). 5 accepts (end of generation allowed) and goes on; 6 is complete.
TABLE: dict[int, dict[int, int]] = {
    0: {0: 1, 1: 2, 2: 4},
    1: {3: 3},
    3: {0: 5},
    2: {0: 2, 1: 5, 3: 6},
    4: {1: 5, 2: 2, 3: 0},
    5: {1: 5, 2: 6},
    6: {},
}
ACCEPTING = {5, 6}
#: the text before the output, for prompt lookup (it proposes legal and illegal tokens alike)
PROMPT = (0, 1, 3, 0, 2, 2, 1, 0, 3, 3, 1, 2)
#: the law compared: of the first N_TOKENS emitted tokens (EOG ends a sequence and is kept as its last)
N_TOKENS = 5
BUG = 1e-3


def grammar() -> TokenTableConstraint:
    return TokenTableConstraint(TABLE, ACCEPTING, V, [EOG])


def local_mask(state: int) -> np.ndarray:
    """The reference's mask, from the table alone: the state's tokens, EOG where it accepts."""
    allowed = np.zeros(V, dtype=bool)
    allowed[list(TABLE[state])] = True
    allowed[EOG] = state in ACCEPTING
    return allowed


@functools.lru_cache(maxsize=None)
def _row(seed: int, params: SamplingParams, prefix: tuple[int, ...], which: int, mask: bytes | None) -> np.ndarray:
    logits = _logits(seed, prefix)[which].copy()
    if which == 1:
        logits[LACKS] = -np.inf
    if mask is not None:
        logits[~np.frombuffer(mask, dtype=bool)] = -np.inf
    if not np.isfinite(logits).any():
        return np.zeros(V)  # nothing allowed
    return to_probs(logits, params)


@dataclass(frozen=True)
class Pair:
    """Target rows p and draft rows q after a prefix (the emitted tokens and
    drafts), masked by ``mask`` (None: unmasked), through the same params."""

    seed: int
    params: SamplingParams

    def p(self, prefix: tuple[int, ...], mask: np.ndarray | None) -> np.ndarray:
        return _row(self.seed, self.params, prefix, 0, None if mask is None else mask.tobytes())

    def q(self, prefix: tuple[int, ...], mask: np.ndarray | None) -> np.ndarray:
        return _row(self.seed, self.params, prefix, 1, None if mask is None else mask.tobytes())


# -- the reference: target-only decoding with local masking --------------------------------


def constrained_target_law(pair: Pair, n_tokens: int = N_TOKENS) -> Law:
    """At each position the target's row masked by the grammar (from the table),
    then the params, then sampling; until n tokens or an end of generation."""
    law: Law = defaultdict(float)

    def walk(seq: tuple[int, ...], state: int, prob: float) -> None:
        if len(seq) == n_tokens:
            law[seq] += prob
            return
        row = pair.p(seq, local_mask(state))
        for t in np.flatnonzero(row):
            t = int(t)
            if t == EOG:
                law[seq + (EOG,)] += prob * row[t]
            else:
                walk(seq + (t,), TABLE[state][t], prob * row[t])

    walk((), 0, 1.0)
    return law


# -- the speculative side, as the engine runs it -------------------------------------------


@dataclass(frozen=True)
class Engine:
    """How the passes are run. ``drafter``: "model" (masked draft rows, as the
    engine does), "lookup" (one-hot prompt-lookup drafts, maybe illegal), or
    "unmasked" (a draft model whose rows are not masked: its tokens may be
    illegal). The last three fields plant the known bugs."""

    drafter: str = "model"
    forced_drafts: bool = True
    #: False plants "cut the draft before an illegal token, draw a bonus token instead"
    keep_illegal: bool = True
    #: True plants "the grammar state advanced by the whole draft path, rejected drafts included"
    advance_by_drafts: bool = False
    #: False plants "the bonus row (after k drafts) is not masked"
    mask_bonus: bool = True


@dataclass
class Coverage:
    """Probability mass of passes (summed over the whole run) that exercised each case."""

    forced: float = 0.0
    nothing_allowed: float = 0.0  # the draft stopped where its masked row allowed nothing
    illegal_kept: float = 0.0  # a draft kept its illegal token as the last draft
    eog_drafted: float = 0.0
    short: float = 0.0  # fewer drafts than k
    complete: float = 0.0  # stopped without a pass: the grammar was complete
    ends: dict = field(default_factory=lambda: defaultdict(float))  # state -> mass of EOG emitted there


def _at(g: TokenTableConstraint, state: int) -> TokenTableConstraint:
    g.state = state
    return g


def _proposals(pair: Pair, g: TokenTableConstraint, state: int, seq: tuple[int, ...], k: int, how: Engine,
               cov: Coverage, weight: float):
    """(draft, q rows, probability) for every draft the drafter can propose."""
    if k == 0:
        yield (), [], 1.0
        return
    if how.drafter == "lookup":
        draft = tuple(PromptLookupDrafter().lookup(PROMPT + seq, k))
        yield draft, [np.eye(V)[x] for x in draft], 1.0
        return

    def walk(path: tuple[int, ...], rows: list[np.ndarray], prob: float):
        if len(path) == k or (path and path[-1] == EOG):
            yield path, rows, prob
            return
        mask = _at(g, state).allowed(path)
        if how.drafter == "unmasked":
            if mask is None:  # past an illegal token: the draft is cut after it anyway
                yield path, rows, prob
                return
            mask = None
        row = pair.q(seq + path, mask)
        if not row.any():
            cov.nothing_allowed += weight * prob
            yield path, rows, prob  # nothing is allowed here: drafting stops
            return
        for x in np.flatnonzero(row):
            yield from walk(path + (int(x),), rows + [row], prob * row[x])

    yield from walk((), [], 1.0)


def _lenient_state(state: int, tokens: tuple[int, ...]) -> int:
    """The state after the legal prefix of ``tokens`` (a planted bug's grammar moves so)."""
    for t in tokens:
        if t not in TABLE[state]:
            break
        state = TABLE[state][t]
    return state


def speculative_law(pair: Pair, k: int, rule, how: Engine = Engine(), n_tokens: int = N_TOKENS
                    ) -> tuple[Law, Coverage]:
    """The law of the emitted sequences of the engine's loop under the grammar
    (max_tokens = n_tokens, a fixed draft length k), over every draft and coin
    of every pass; and what the passes exercised."""
    g = grammar()
    law: Law = defaultdict(float)
    cov = Coverage()
    frontier: dict[tuple[tuple[int, ...], int], float] = {((), 0): 1.0}
    while frontier:
        later: dict[tuple[tuple[int, ...], int], float] = defaultdict(float)
        for (seq, state), weight in frontier.items():
            if len(seq) == n_tokens:  # finish "length"
                law[seq] += weight
                continue
            if _at(g, state).done:  # finish "stop" without a target pass
                law[seq + (EOG,)] += weight
                cov.complete += weight
                cov.ends[state] += weight
                continue
            k_pass = min(k, n_tokens - len(seq) - 1)  # never more drafts than can be emitted
            forced = _at(g, state).forced()[:k_pass] if how.forced_drafts and k_pass > 0 else []
            if forced:
                cov.forced += weight
                proposals = [(tuple(forced), [np.eye(V)[x] for x in forced], 1.0)]
            else:
                proposals = _proposals(pair, g, state, seq, k_pass, how, cov, weight)
            for draft, q_rows, q_prob in proposals:
                w = weight * q_prob
                legal = _at(g, state).legal_prefix(draft)
                if legal < len(draft):
                    if how.keep_illegal:
                        draft, q_rows = draft[: legal + 1], q_rows[: legal + 1]
                        cov.illegal_kept += w * (draft[-1] != EOG)
                    else:
                        draft, q_rows = draft[:legal], q_rows[:legal]
                cov.eog_drafted += w * (EOG in draft)
                cov.short += w * (len(draft) < k_pass)
                masks = [_at(g, state).allowed(draft[:i]) for i in range(len(draft) + 1)]
                if not how.mask_bonus and draft:
                    masks[-1] = None
                p_target = np.stack([pair.p(seq + draft[:i], masks[i]) for i in range(len(draft) + 1)])
                q_draft = np.array(q_rows).reshape(len(draft), V)
                for (n_accepted, t), pr in rule(p_target, q_draft, draft).items():
                    if pr == 0.0:
                        continue  # (the token-wise formula lists outcomes of probability 0 past a rejection)
                    new = draft[:n_accepted] + (t,)
                    if EOG in new:  # finish "stop": the output ends at the end of generation
                        law[seq + new[: new.index(EOG) + 1]] += w * pr
                        cov.ends[_lenient_state(state, new[: new.index(EOG)])] += w * pr
                        continue
                    if how.advance_by_drafts:
                        after = _lenient_state(_lenient_state(state, draft), (t,))
                    elif how.mask_bonus:
                        _at(g, state).commit(new)  # the engine's: it refuses illegal emitted tokens
                        after = g.state
                    else:
                        after = _lenient_state(state, new)
                    later[(seq + new, after)] += w * pr
        frontier = later
    return law, cov


RULES = {"token": tokenwise_law, "block": block_law}
#: seeds whose masked law spreads over many sequences (entropy > 2 nats), about 70% of them ended by EOG
SETUPS = [pytest.param(Pair(seed, params), id=name) for name, seed, params in [("plain", 8, PLAIN),
                                                                               ("filtered", 27, FILTERED)]]


# -- the reference itself -------------------------------------------------------------------


@pytest.mark.parametrize("pair", SETUPS)
def test_the_reference_is_the_grammar_under_local_masking(pair):
    """The reference law lives on the grammar: every sequence follows the table,
    ends (EOG) only in an accepting state, and every complete one ends there;
    it differs from the unmasked target's law (the mask matters), and the
    grammar's own masks (TokenTableConstraint) are the table's."""
    law = constrained_target_law(pair)
    assert sum(law.values()) == pytest.approx(1.0, abs=EXACT)
    n_ended = 0
    for seq, pr in law.items():
        body = seq[:-1] if seq[-1] == EOG else seq
        state = 0
        for t in body:
            state = TABLE[state][t]  # KeyError: an illegal token
        if seq[-1] == EOG:
            assert state in ACCEPTING
            n_ended += 1
        if state == 6:
            assert seq[-1] == EOG or len(seq) == N_TOKENS
    assert n_ended >= 5
    ended = sum(pr for seq, pr in law.items() if seq[-1] == EOG)
    assert 0.05 < ended < 0.95
    g = grammar()
    for state in TABLE:
        np.testing.assert_array_equal(_at(g, state).allowed(()), local_mask(state))
    assert _at(g, 1).forced() == [3, 0] and _at(g, 3).forced() == [0] and _at(g, 0).forced() == []
    assert _at(g, 6).done and not _at(g, 5).done
    # local masking is not the unmasked law: the first token alone moves by more than 0.05
    p0 = pair.p((), None)
    first = np.zeros(V)
    for seq, pr in law.items():
        first[seq[0]] += pr
    assert 0.5 * np.abs(first - p0).sum() > 0.05


# -- exactness ---------------------------------------------------------------------------


@pytest.mark.parametrize("forced_drafts", [True, False], ids=["forced", "no_forced"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("pair", SETUPS)
def test_model_drafts_under_a_grammar_give_the_masked_target_law(pair, k, rule, forced_drafts):
    """A draft model drafting from masked rows (its tokens are always legal;
    the masks forbid tokens it would propose; where its row allows nothing it
    stops; it stops after an end of generation), forced runs drafted one-hot
    or not, EOG only in accepting states, a complete grammar stopping without
    a pass: the law of the first 5 emitted tokens is the masked target-only
    law to 1e-12, for both rules."""
    law, cov = speculative_law(pair, k, RULES[rule], Engine("model", forced_drafts))
    assert_same_law(law, constrained_target_law(pair))
    assert cov.eog_drafted > 1e-3 and cov.complete > 0.01
    if k > 1 or not forced_drafts:  # k = 1 with forced drafts: state 1 starts a pass, and is forced
        assert cov.nothing_allowed > 0.01
    assert cov.illegal_kept == 0.0  # masked rows propose legal tokens only
    assert (cov.forced > 0.01) == forced_drafts
    if k > 1:
        assert cov.short > 0.05  # variable draft lengths
    assert set(cov.ends) == {5, 6}  # EOG only where the grammar accepts


@pytest.mark.parametrize("forced_drafts", [True, False], ids=["forced", "no_forced"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("pair", SETUPS)
def test_one_hot_illegal_drafts_kept_as_the_last_draft_keep_the_law(pair, k, rule, forced_drafts):
    """Prompt lookup: one-hot drafts, legal or not; an illegal one stays as the
    last draft (its masked p is 0, so the rule rejects it and samples the
    residual there). The law is unchanged, with the token-wise rule and with
    block verification applied to these one-hot blocks too (the engine uses
    the token-wise rule for them; both are exact)."""
    law, cov = speculative_law(pair, k, RULES[rule], Engine("lookup", forced_drafts))
    assert_same_law(law, constrained_target_law(pair))
    assert cov.illegal_kept > 0.05
    assert cov.short > 0.01 or k == 1
    assert (cov.forced > 0.01) == forced_drafts


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("pair", SETUPS)
def test_an_unmasked_draft_with_its_illegal_token_kept_is_still_exact(pair, k, rule):
    """A draft model whose rows are not masked (its q is the one it truly
    sampled from) proposes illegal tokens, and EOG where the grammar cannot
    end; kept as the last draft, each is rejected by the rule with the
    residual max(0, p - q) sampled there: still exactly the masked law."""
    law, cov = speculative_law(pair, k, RULES[rule], Engine("unmasked", forced_drafts=False))
    assert_same_law(law, constrained_target_law(pair))
    assert cov.illegal_kept > 0.05


# -- planted bugs --------------------------------------------------------------------------


def _distance(a: Law, b: Law) -> float:
    return max(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in set(a) | set(b))


@pytest.mark.parametrize("drafter", ["model", "lookup"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("pair", SETUPS)
def test_a_grammar_advanced_by_rejected_drafts_breaks_the_law(pair, rule, drafter):
    """Planted: after a pass the grammar has consumed the whole draft path
    (rejected drafts included), then the token sampled after them where legal
    (as engines that do not roll back their matcher do). The law moves by
    more than 1e-3."""
    law, _ = speculative_law(pair, 2, RULES[rule], Engine(drafter, advance_by_drafts=True))
    assert _distance(law, constrained_target_law(pair)) > BUG


@pytest.mark.parametrize("drafter", ["model", "lookup"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("pair", SETUPS)
def test_an_unmasked_bonus_row_breaks_the_law(pair, rule, drafter):
    """Planted: the bonus row (after k accepted drafts, k >= 1) sampled from
    the unmasked target row. The law moves by more than 1e-3."""
    law, _ = speculative_law(pair, 2, RULES[rule], Engine(drafter, mask_bonus=False))
    assert _distance(law, constrained_target_law(pair)) > BUG


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("pair", SETUPS)
def test_a_draft_cut_before_its_illegal_token_breaks_the_law(pair, k, rule):
    """Planted: a draft from unmasked rows cut *before* its first illegal token,
    the rule run on the legal prefix with the q it was drawn from, and a bonus
    token drawn after it instead. Keeping the illegal token is exact (test
    above); cutting before it moves the law by more than 1e-3."""
    law, _ = speculative_law(pair, k, RULES[rule], Engine("unmasked", forced_drafts=False, keep_illegal=False))
    assert _distance(law, constrained_target_law(pair)) > BUG


def test_cutting_before_an_illegal_one_hot_draft_is_harmless():
    """Why the cut needs an unmasked q: a one-hot lookup draft is a fixed
    function of the text, so cutting it before an illegal token only shortens
    a draft chosen before any draw, which is exact (so the bug above is about
    the q, not the cut alone)."""
    pair = Pair(8, PLAIN)
    law, cov = speculative_law(pair, 3, tokenwise_law, Engine("lookup", keep_illegal=False))
    assert_same_law(law, constrained_target_law(pair))
