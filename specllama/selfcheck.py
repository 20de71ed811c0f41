"""A statistical self-check of exactness on the user's own pair and machine.

Speculative decoding is exact in law: every emitted token has the target's
distribution. This module checks that claim where it can break in practice,
in a given build of llama.cpp, backend, offload setting and quantization:

1. the *expected* law of the first token is the target's own one-row decode
   after the prompt (what target-only decoding samples from), processed and
   filtered with the chosen settings;
2. N first tokens are drawn by speculative decoding (a fixed draft length,
   one generator for all samples, the prompt reused in both caches);
3. whenever the first token is t1*, the most likely first token (that is not
   end-of-generation), the next token of the same run is a sample of
   p(. | prompt, t1*), whose expected law is a one-row decode after
   prompt + [t1*];
4. each law is tested by Pearson's chi-square at level :data:`ALPHA`
   (:mod:`specllama.chisquare`); at temperature 0 (or when one token has all
   the mass) every sample must equal the target's choice instead.

The result states what the run could have detected (Cohen's w at power
:data:`POWER`), so a PASS says how much it is worth.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import shlex
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .chisquare import GoodnessOfFit, detectable_effect, goodness_of_fit, pooled_bins, power
from .constraint import GrammarSpec, LLGuidanceConstraint, masked
from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .generation import tokenize_prompt
from .options import DEFAULT_RULE, check_draft, check_rule
from .processors import Processor, processed
from .sampling import SamplingParams, to_probs

#: significance level of each check (the overall level is this times the checks run)
ALPHA = 1e-3
#: the power at which the smallest detectable bias is stated
POWER = 0.99
#: samples drawn by default (on the demo pair: 72-79 s for the whole run on 2 idle CPU cores)
DEFAULT_SAMPLES = 500
#: the draft length, fixed on every pass (not the adaptive policy's cap)
VERIFY_DRAFT_MAX = 4
#: a prompt after which the demo pair's next token is far from certain
DEFAULT_PROMPT = "My favourite thing to eat is"
#: tokens shown per table, most likely first
N_SHOWN = 10

FIRST, SECOND = "first token", "second token"
CHI_SQUARE, ALL_EQUAL, SKIPPED = "chi-square", "all equal", "skipped"


@dataclass(frozen=True)
class TokenCount:
    """One table row: a token, or a group of them.

    Attributes:
        token: the token id (-1 for a group).
        text: how it reads: a repr of its text, or ``<eos>``-style for a
            control token, or a group's description.
        expected_prob: its probability under the target's one-row decode.
        expected_count: n * expected_prob.
        observed: how many speculative samples it was.
    """

    token: int
    text: str
    expected_prob: float
    expected_count: float
    observed: int


@dataclass(frozen=True)
class Check:
    """One law tested.

    Attributes:
        name: "first token" or "second token".
        context: what the token follows, e.g. "the prompt + ' pizza'".
        kind: "chi-square"; "all equal" (a one-token law: temperature 0, or
            filters that keep one token; every sample must be that token);
            "skipped" (too few samples for a chi-square test).
        n: samples of this token.
        rows: the most likely tokens, then any sampled token the target gives
            probability 0, then the rest of the support as one group.
        test: the chi-square test (None when skipped).
        detectable_w: Cohen's w detected with probability :data:`POWER` (None
            unless a chi-square test ran).
        top_shift: that w as a shift of the top token's probability (the
            others rescaled): w * sqrt(p (1 - p)).
        top_prob: the top token's expected probability.
        passed: the verdict (None when skipped).
        draft_w: Cohen's w of the draft model's own law from the target's on
            the test's bins (first token, chi-square, a draft model only):
            the bias of a sampler that kept every draft token.
        draft_power: the chance that this check fails such a sampler.
        draft_excluded: the draft law's mass on tokens the target excludes
            (one such sample fails the check).
    """

    name: str
    context: str
    kind: str
    n: int
    rows: list[TokenCount]
    test: GoodnessOfFit | None
    detectable_w: float | None
    top_shift: float | None
    top_prob: float
    passed: bool | None
    draft_w: float | None = None
    draft_power: float | None = None
    draft_excluded: float | None = None


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`run_verify` found.

    Attributes:
        passed: no check failed.
        checks: the first-token check, then (unless no first token but
            end-of-generation has probability) the second-token check.
        alpha: the level of each check.
        overall_alpha: the chance that a correct implementation fails the
            run: alpha times the chi-square checks run (Bonferroni).
        settings: the sampling, speculation and load settings, the seed used
            and the prompt.
        environment: model files, versions, platform.
        greedy: temperature 0 (every check is "all equal").
        batch_logit_diff: the largest |logit| difference seen between the
            one-row decode and row 0 of a speculative pass's batch (the same
            position, computed in a (k+1)-row batch).
        top_logit_gap: the gap between the two largest first-token logits
            (processed) (at temperature 0 a gap below batch_logit_diff could flip
            the argmax in a batch).
        seconds: the whole check's time (the models' loading excluded).
    """

    passed: bool
    checks: list[Check]
    alpha: float
    overall_alpha: float
    settings: dict
    environment: dict
    greedy: bool
    batch_logit_diff: float
    top_logit_gap: float
    seconds: float

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def as_dict(self) -> dict:
        """The result as plain JSON-ready values."""
        out = _finite(asdict(self))
        out["verdict"] = self.verdict
        return out


def _finite(value: object) -> object:
    """``value`` with every infinite or NaN float replaced by None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def token_text(model: object, token: int) -> str:
    """How a token reads in a table: the repr of its text (its bytes' repr
    when they are not UTF-8 on their own), or ``<eos>`` for a control token."""
    piece = model.token_bytes(token) if hasattr(model, "token_bytes") else b""  # type: ignore[attr-defined]
    if not piece:
        if hasattr(model, "detokenize_special"):
            special = model.detokenize_special(token)  # type: ignore[attr-defined]
            if special:
                return special
        return f"#{token}"
    try:
        return repr(piece.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(piece)


def fresh_seed() -> int:
    """A 32-bit seed from the operating system's entropy."""
    return int(np.random.SeedSequence().generate_state(1)[0])


def environment(engine: SpeculativeEngine) -> dict:
    """The facts a bug report about this pair and machine needs: model files
    (paths and sizes), architecture, versions, platform and CPU."""

    def model_info(model: object) -> dict:
        path = getattr(model, "path", None)
        meta = getattr(model, "metadata", {}) or {}
        return {
            "path": path,
            "bytes": os.path.getsize(path) if path and os.path.exists(path) else None,
            "architecture": meta.get("general.architecture"),
            "name": meta.get("general.name"),
            "n_vocab": getattr(model, "n_vocab", None),
            "n_ctx": getattr(model, "n_ctx", None),
        }

    if engine.draft is not None:
        draft: object = model_info(engine.draft)
    else:
        draft = "prompt-lookup" if engine.drafter is not None else None
    return {
        "target": model_info(engine.target),
        "draft": draft,
        "versions": {pkg: _version(pkg) for pkg in ("specllama", "llama-cpp-python", "numpy")}
        | {"python": platform.python_version()},
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "llama_cpp_build": _build_info(),
    }


def _build_info() -> dict:
    """llama.cpp's own account of this build: GPU offload, backends, CPU features."""
    from .backend import supports_gpu_offload, system_info

    return {"gpu_offload": supports_gpu_offload(), "system_info": system_info()}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _one_row(engine: SpeculativeEngine, tokens: Sequence[int], n_cached: int) -> np.ndarray:
    """The target's raw logits after ``tokens``, with ``tokens[:n_cached]``
    already in its cache, the rest decoded in one batch for one row."""
    target = engine.target
    target.rewind(n_cached)
    return np.array(target.eval(list(tokens[n_cached:]), n_logits=1)[0], dtype=np.float32)


def _fewest_samples(p: np.ndarray) -> int:
    """The fewest samples whose test of ``p`` has two bins."""
    n = 1
    while len(pooled_bins(p, n)) < 2:
        n *= 2
    lo = n // 2  # too few (or 0)
    while n - lo > 1:
        mid = (lo + n) // 2
        if len(pooled_bins(p, mid)) >= 2:
            n = mid
        else:
            lo = mid
    return n


def _draft_law(engine: SpeculativeEngine, prompt_tokens: Sequence[int], params: SamplingParams,
               processor: Processor | None, mask: np.ndarray | None = None) -> np.ndarray | None:
    """The draft model's law of the first token (what it drafts from), over
    the target's vocabulary; None without a draft model."""
    draft = engine.draft
    if draft is None or len(prompt_tokens) > draft.n_ctx:
        return None
    draft.rewind(0)
    row = np.array(draft.eval(list(prompt_tokens), n_logits=1)[0], dtype=np.float32)
    n_vocab = engine.target.n_vocab
    # ids the target lacks are cut; ids the draft lacks (padding) get -inf
    row = row[:n_vocab] if row.shape[0] >= n_vocab else np.concatenate(
        [row, np.full(n_vocab - row.shape[0], -np.inf, dtype=np.float32)])
    return to_probs(masked(processed(row, prompt_tokens, processor), mask), params)


def _most_likely(p: np.ndarray, is_eog: Callable[[int], bool]) -> int | None:
    """The most likely token that is not end-of-generation (None if none has mass)."""
    for token in np.argsort(-p, kind="stable"):
        if p[token] <= 0.0:
            return None
        if not is_eog(int(token)):
            return int(token)
    return None


def run_verify(
    engine: SpeculativeEngine,
    *,
    params: SamplingParams,
    processor: Processor | None = None,
    prompt: str | Sequence[int] = DEFAULT_PROMPT,
    n_samples: int = DEFAULT_SAMPLES,
    draft_max: int = VERIFY_DRAFT_MAX,
    rule: str = DEFAULT_RULE,
    alpha: float = ALPHA,
    settings: Mapping[str, object] | None = None,
    on_sample: Callable[[], None] | None = None,
    grammar: GrammarSpec | None = None,
    grammar_consumed: Sequence[int] = (),
) -> VerifyResult:
    """Check that speculative decoding samples the target's distribution.

    Args:
        engine: the pair under test (its draft may be None or prompt lookup).
        params: sampling transforms; ``params.seed`` seeds the one generator
            of all samples (None: a fresh seed, reported in the result).
        processor: the logits processor (penalties), as for generation.
        prompt: text or token ids.
        n_samples: speculative runs, each giving a first token (and a second
            when the first is the most likely one).
        draft_max: k, drafted on every pass (fixed, not adaptive).
        rule: "token" or "block" acceptance.
        alpha: the level of each check.
        settings: more settings to record (the load flags, the penalties).
        on_sample: called after each sample (a progress bar).
        grammar: a constraint (:mod:`specllama.constraint`): the expected laws
            are the target's locally masked rows, and every sample decodes
            under a fresh copy of the grammar.
        grammar_consumed: tokens the grammar has already consumed (a reply
            in progress, at the end of the prompt): each copy starts after them.

    Returns:
        The :class:`VerifyResult`.

    Raises:
        SpecLlamaError: a bad argument, a prompt that leaves no room for
            two more tokens in the context, or too few samples for a test of
            the first token.
    """
    t_start = time.perf_counter()
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise SpecLlamaError(f"the number of samples must be an integer >= 1, got {n_samples!r}")
    if not (isinstance(alpha, float) and 0.0 < alpha < 0.5):
        raise SpecLlamaError(f"alpha must be a number in (0, 0.5), got {alpha!r}")
    draft_max = engine.draft_cap(check_draft(draft_max)[0])
    rule = check_rule(rule)
    target = engine.target
    prompt_tokens = tokenize_prompt(engine, prompt)
    if len(prompt_tokens) + 2 > target.n_ctx:
        raise SpecLlamaError(
            f"the prompt is {len(prompt_tokens)} tokens and the context (-c/--ctx-size) {target.n_ctx}: "
            f"verify needs room for two more tokens (use a prompt of at most {target.n_ctx - 2} tokens)"
        )
    seed = fresh_seed() if params.seed is None else params.seed

    def fresh_constraint() -> LLGuidanceConstraint | None:
        if grammar is None:
            return None
        constraint = LLGuidanceConstraint(grammar, target.grammar_tokenizer(), target.n_vocab)
        constraint.commit(grammar_consumed)
        return constraint

    if grammar_consumed and (grammar is None or LLGuidanceConstraint(
            grammar, target.grammar_tokenizer(), target.n_vocab).legal_prefix(grammar_consumed) < len(
                grammar_consumed)):
        raise SpecLlamaError(f"the grammar does not allow the tokens it is said to have consumed "
                             f"({list(grammar_consumed)[:8]}...)", param="grammar_consumed")
    probe = fresh_constraint()
    mask_1 = probe.allowed(()) if probe is not None else None
    # The expected laws: one-row target decodes, as target-only decoding samples them.
    logits_1 = _one_row(engine, prompt_tokens, 0)
    row_1 = masked(processed(logits_1, prompt_tokens, processor), mask_1)
    p_first = to_probs(row_1, params)
    q_first = _draft_law(engine, prompt_tokens, params, processor, mask_1)
    t1_star = _most_likely(p_first, target.is_eog)
    if int((p_first > 0).sum()) > 1 and len(pooled_bins(p_first, n_samples)) < 2:
        raise SpecLlamaError(
            f"{n_samples} samples are too few for a chi-square test of this prompt's first token: "
            f"use -N/--samples {_fewest_samples(p_first)} or more"
        )
    p_second = None
    if t1_star is not None:
        logits_2 = _one_row(engine, prompt_tokens + [t1_star], len(prompt_tokens))
        mask_2 = probe.allowed([t1_star]) if probe is not None else None
        p_second = to_probs(masked(processed(logits_2, prompt_tokens + [t1_star], processor), mask_2), params)

    # The samples: one generator for all, the prompt kept in both caches.
    rng = np.random.default_rng(seed)
    first: Counter[int] = Counter()
    second: Counter[int] = Counter()
    batch_diff = 0.0
    for _ in range(n_samples):
        tokens: list[int] = []
        # k drafts emit up to k + 1 tokens; at least 2, for the second token
        steps = engine.steps(prompt_tokens, params=params, draft_max=draft_max, max_tokens=max(draft_max + 1, 2),
                             rng=rng, adaptive=False, processor=processor, rule=rule, constraint=fresh_constraint())
        try:
            for step in steps:
                if not tokens and step.target_logits is not None:
                    # row 0 of the first pass is the first token's row, computed in a batch
                    batch_diff = max(batch_diff, float(np.max(np.abs(step.target_logits[0] - logits_1))))
                tokens.extend(step.tokens)
                if step.eog_token is not None:
                    tokens.append(step.eog_token)
                # a second token is needed only after t1*
                if step.finish_reason is not None or (tokens and (tokens[0] != t1_star or len(tokens) >= 2)):
                    break
        finally:
            steps.close()
        first[tokens[0]] += 1
        if tokens[0] == t1_star and len(tokens) >= 2:
            second[tokens[1]] += 1
        if on_sample is not None:
            on_sample()

    checks = [_check(FIRST, "the prompt", first, p_first, target, alpha, q_first)]
    if t1_star is not None and p_second is not None:
        checks.append(_check(SECOND, f"the prompt + {token_text(target, t1_star)}", second, p_second, target,
                             alpha))
    failed = any(c.passed is False for c in checks)
    n_tested = sum(c.kind == CHI_SQUARE for c in checks)
    top2 = np.partition(np.asarray(row_1, dtype=np.float64), row_1.shape[0] - 2)[-2:]
    recorded = dict(settings or {})
    recorded.update({
        "prompt": prompt if isinstance(prompt, str) else list(prompt_tokens),
        "n_prompt_tokens": len(prompt_tokens),
        "samples": n_samples,
        "seed": seed,
        "seed_given": params.seed is not None,
        "temperature": params.temperature,
        "top_k": params.top_k,
        "top_p": params.top_p,
        "min_p": params.min_p,
        "draft_max": draft_max if engine.drafter is not None else 0,
        "rule": rule,
    })
    if grammar is not None:
        recorded[GRAMMAR_KEYS[grammar.kind]] = grammar.text
    return VerifyResult(
        passed=not failed,
        checks=checks,
        alpha=alpha,
        overall_alpha=alpha * n_tested,
        settings=recorded,
        environment=environment(engine),
        greedy=params.greedy,
        batch_logit_diff=batch_diff,
        top_logit_gap=float(abs(top2[1] - top2[0])),
        seconds=time.perf_counter() - t_start,
    )


def _check(name: str, context: str, counts: Counter, p: np.ndarray, model: object, alpha: float,
           q_draft: np.ndarray | None = None) -> Check:
    """Test one token's samples against its expected law ``p`` (and say how
    likely the test was to catch samples of the draft's law ``q_draft``)."""
    n = sum(counts.values())
    observed = np.zeros(p.shape[0], dtype=np.int64)
    for token, c in counts.items():
        observed[token] = c
    rows = _rows(observed, p, model)
    top_prob = float(p.max())
    if int((p > 0).sum()) == 1:
        test = goodness_of_fit(observed, p, alpha=alpha)
        return Check(name, context, ALL_EQUAL, n, rows, test, None, None, top_prob, test.passed)
    try:
        test = goodness_of_fit(observed, p, alpha=alpha)
    except ValueError:
        if observed[p <= 0].sum() > 0:
            # a token the target forbids fails the check however few samples there are
            test = GoodnessOfFit(n, math.inf, 0, 0.0, math.inf, alpha, int(observed[p <= 0].sum()), False)
            return Check(name, context, CHI_SQUARE, n, rows, test, None, None, top_prob, False)
        return Check(name, context, SKIPPED, n, rows, None, None, None, top_prob, None)
    w = detectable_effect(n, test.df, power=POWER, alpha=alpha)
    draft_w = draft_power = draft_excluded = None
    if q_draft is not None:
        draft_power = power(n, p, q_draft, alpha=alpha)
        draft_excluded = float(q_draft[p <= 0].sum() / q_draft.sum())
        bins = pooled_bins(p, n)
        on = np.where(p > 0, q_draft, 0.0)
        if on.sum() > 0:
            p_bin = np.array([p[b].sum() for b in bins]) / p.sum()
            q_bin = np.array([on[b].sum() for b in bins]) / on.sum()
            draft_w = float(np.sqrt(((q_bin - p_bin) ** 2 / p_bin).sum()))
    return Check(name, context, CHI_SQUARE, n, rows, test, w, w * math.sqrt(top_prob * (1.0 - top_prob)),
                 top_prob, test.passed, draft_w, draft_power, draft_excluded)


def _rows(observed: np.ndarray, p: np.ndarray, model: object) -> list[TokenCount]:
    """The table: the :data:`N_SHOWN` most likely tokens, the sampled
    tokens the target forbids, then the rest of the support as one row."""
    n = int(observed.sum())
    support = np.flatnonzero(p > 0)
    by_prob = support[np.argsort(-p[support], kind="stable")]
    shown = by_prob[:N_SHOWN]

    def row(token: int) -> TokenCount:
        return TokenCount(int(token), token_text(model, int(token)), float(p[token]), n * float(p[token]),
                          int(observed[token]))

    rows = [row(t) for t in shown]
    rows += [row(t) for t in np.flatnonzero((observed > 0) & (p <= 0))]
    rest = by_prob[N_SHOWN:]
    if rest.size:
        prob = float(p[rest].sum())
        rows.append(TokenCount(-1, f"({rest.size} other tokens)", prob, n * prob, int(observed[rest].sum())))
    return rows


# -- the report ------------------------------------------------------------------


#: (flag, settings key, neutral value) of the penalties
PENALTIES = (("--repeat-penalty", "repeat_penalty", 1.0), ("--presence-penalty", "presence_penalty", 0.0),
             ("--frequency-penalty", "frequency_penalty", 0.0))


def _size(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "size unknown"
    return f"{n_bytes:,} bytes, {n_bytes / 2**20:.1f} MiB"


#: where a report records the constraint it ran under, by the grammar's kind (the CLI's flag names)
GRAMMAR_KEYS = {"gbnf": "grammar", "json_schema": "json_schema", "regex": "regex", "lark": "lark"}


def _replay(s: Mapping, env: Mapping) -> str:
    """The command line that draws these very samples again."""
    args = ["specllama", "verify", "-m", str(env["target"]["path"])]
    draft = env["draft"]
    if draft is not None:
        args += ["-md", draft if isinstance(draft, str) else str(draft["path"])]
    for flag, key in (("-c", "ctx_size"), ("-ngl", "n_gpu_layers"), ("-ngld", "n_gpu_layers_draft"),
                      ("-t", "threads"), ("--rpc", "rpc"), ("--rpc-draft", "rpc_draft"), ("-ts", "tensor_split")):
        if s.get(key) is not None:
            args += [flag, str(s[key])]
    args += ["-N", str(s["samples"]), "-s", str(s["seed"]), "--temp", str(s["temperature"]),
             "--top-k", str(s["top_k"]), "--top-p", str(s["top_p"]), "--min-p", str(s["min_p"])]
    active = [(flag, key) for flag, key, off in PENALTIES if s.get(key, off) != off]
    for flag, key in active:
        args += [flag, str(s[key])]
    if active and "repeat_last_n" in s:
        args += ["--repeat-last-n", str(s["repeat_last_n"])]
    args += ["--draft-max", str(s["draft_max"]), "--rule", s["rule"]]
    for flag, key in (("--grammar", "grammar"), ("--json-schema", "json_schema"), ("--regex", "regex")):
        if key in s:
            args += [flag, str(s[key])]
    if not isinstance(s["prompt"], str):
        return "(none: the prompt was given as token ids)"
    return shlex.join(args + ["-p", s["prompt"]])


def _table(check: Check) -> list[str]:
    width = max([len("token")] + [len(r.text) for r in check.rows])
    lines = [f"  {'token':<{width}}  {'expected p':>10}  {'expected n':>10}  {'observed n':>10}"]
    for r in check.rows:
        lines.append(f"  {r.text:<{width}}  {r.expected_prob:>10.4f}  {r.expected_count:>10.1f}  {r.observed:>10d}")
    return lines


def _in_words(top_prob: float, shift: float) -> str:
    """A bias of Cohen's w as the top token's probability moved by ``shift``."""
    moves = [f"{verb} to {top_prob + sign * shift:.3f}" for verb, sign in (("raised", 1), ("lowered", -1))
             if 0.0 <= top_prob + sign * shift <= 1.0]
    if not moves:
        return "more than any change of the top token's probability alone"
    return f"e.g. the top token's probability {top_prob:.3f} {' or '.join(moves)}, the others rescaled"


def _check_lines(check: Check, result: VerifyResult) -> list[str]:
    lines = [f"{check.name} after {check.context}: {check.n} speculative samples against the target's "
             "one-row decode"]
    lines += _table(check)
    t = check.test
    if check.kind == SKIPPED:
        lines.append(f"  skipped: {check.n} samples are too few for a chi-square test (raise -N/--samples)")
    elif check.kind == ALL_EQUAL:
        why = "temperature 0 is deterministic" if result.greedy else "one token has all the probability"
        lines.append(f"  {why}: every sample must be the target's token; "
                     f"{check.n - t.off_support} of {check.n} are: {'PASS' if check.passed else 'FAIL'}")
    elif t.df == 0:
        lines.append(f"  {t.off_support} samples of tokens the target gives probability 0: FAIL")
    else:
        off = f"; {t.off_support} samples of tokens the target gives probability 0" if t.off_support else ""
        lines.append(f"  chi-square {t.statistic:.2f}, df {t.df}, p-value {t.p_value:.4g} "
                     f"(fail below alpha {t.alpha:g}){off}: {'PASS' if check.passed else 'FAIL'}")
        lines.append(f"  detectable with probability {POWER:g}: Cohen's w {check.detectable_w:.3f}, "
                     f"{_in_words(check.top_prob, check.top_shift)}")
        if check.draft_power is not None:
            w = "" if check.draft_w is None else f": w {check.draft_w:.3f} from the target's on these bins"
            lines.append(f"  a sampler that kept every draft token (the draft's own law{w}, "
                         f"{check.draft_excluded:.2%} of it on tokens the target excludes) fails this check "
                         f"with probability {check.draft_power:.3g}")
    return lines


def format_report(result: VerifyResult) -> str:
    """The result as text fit to paste into a bug report: settings, files,
    versions, platform, the tables and the verdict."""
    s, env = result.settings, result.environment
    v = env["versions"]
    target = env["target"]
    draft = env["draft"]
    if draft is None:
        draft_line = "none (target-only decoding)"
    elif isinstance(draft, str):
        draft_line = draft
    else:
        draft_line = f"{draft['path']} ({_size(draft['bytes'])})"
    penalties = [f"{key} {s[key]:g}" for _, key, off in PENALTIES if s.get(key, off) != off]
    if penalties and "repeat_last_n" in s:
        penalties.append(f"repeat_last_n {s['repeat_last_n']}")
    ngld = s.get("n_gpu_layers_draft")
    lines = [
        "specllama verify: is speculative decoding exact on this pair and machine?",
        f"target       {target['path']} ({_size(target['bytes'])}; {target['architecture']}, "
        f"vocabulary {target['n_vocab']})",
        f"draft        {draft_line}",
        f"versions     specllama {v['specllama']}, llama-cpp-python {v['llama-cpp-python']}, "
        f"numpy {v['numpy']}, Python {v['python']}",
        f"platform     {env['platform']}; {env['cpu']} ({env['cpu_count']} cores)",
        f"llama.cpp    GPU offload {'yes' if env['llama_cpp_build']['gpu_offload'] else 'no'}; "
        f"{env['llama_cpp_build']['system_info']}",
        f"load         context {s.get('ctx_size', target['n_ctx'])}, GPU layers {s.get('n_gpu_layers', '?')} "
        f"(draft: {'as the target' if ngld is None else ngld}), threads {s.get('threads') or 'default'}"
        + "".join(f", {name} {s[key]}" for key, name in (("rpc", "RPC servers"), ("rpc_draft", "draft RPC servers"),
                                                         ("tensor_split", "tensor split")) if s.get(key)),
        f"sampling     temperature {s['temperature']:g}, top-k {s['top_k']}, top-p {s['top_p']:g}, "
        f"min-p {s['min_p']:g}; penalties {', '.join(penalties) if penalties else 'off'}"
        + "".join(f"; under the {key} {s[key]!r} (locally masked)" for key in GRAMMAR_KEYS.values() if key in s),
        "speculation  " + (f"draft length {s['draft_max']} on every pass (fixed), rule {s['rule']}" if s["draft_max"]
                           else "none: target-only decoding (a control)"),
        f"samples      {s['samples']}, seed {s['seed']}" + ("" if s["seed_given"] else " (fresh)"),
        f"prompt       {s['prompt']!r} ({s['n_prompt_tokens']} tokens)",
        f"replay       {_replay(s, env)}",
        "",
    ]
    for check in result.checks:
        lines += _check_lines(check, result) + [""]
    lines.append(f"batch rounding: the first token's logits differ by at most {result.batch_logit_diff:.3g} "
                 f"between the one-row decode and a speculative batch (the top two logits are "
                 f"{result.top_logit_gap:.3g} apart)")
    n_forbidden = sum(c.test.off_support for c in result.checks if c.test is not None)
    if n_forbidden and not result.greedy:
        lines.append(f"note: {n_forbidden} samples were tokens the filters of the one-row decode exclude; a token "
                     "within the batch rounding of a top-k/top-p/min-p boundary can cross it without a fault in "
                     "speculative decoding: rerun with --top-k 0 --top-p 1 --min-p 0 to tell")
    n_tested = sum(c.kind == CHI_SQUARE for c in result.checks)
    skipped = [c.name for c in result.checks if c.kind == SKIPPED]
    plural = "s" if n_tested > 1 else ""
    level = (f"each chi-square check at alpha {result.alpha:g}, overall alpha {result.overall_alpha:g} "
             f"(Bonferroni, {n_tested} check{plural})" if n_tested else "deterministic checks only")
    verdict = f"{result.verdict}: {level}"
    if skipped:
        verdict += f"; {' and '.join(skipped)} check skipped"
    lines.append(f"verdict      {verdict}; {result.seconds:.1f} s")
    return "\n".join(lines)
