"""The one road from the engine to every surface: tokens in, text chunks out.

:func:`stream_generate` is the only consumer of
:meth:`SpeculativeEngine.steps`. It owns what every surface needs and none
re-implements: the prompt check, text assembly (UTF-8 safe streaming, stop
strings), ``stopping_criteria``, end-of-generation handling, ``max_tokens``,
per-token origins and the statistics record. The CLI, the chat REPL, the
bench and ``SpeculativeLlama`` consume it; :func:`generate` collects it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

import numpy as np

from .constraint import LLGuidanceConstraint, masked
from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .options import DEFAULT_MAX_TOKENS, GenerationOptions, check_prompt_tokens
from .policy import DEFAULT_DRAFT_MAX  # noqa: F401  (re-exported: the CLI's and the API's default)
from .processors import processed
from .sampling import top_logprobs
from .stats import GenerationStats
from .text import TextAssembler, check_prompt_text

__all__ = ["DEFAULT_DRAFT_MAX", "DEFAULT_MAX_TOKENS", "Chunk", "GenerationResult", "generate", "stream_generate",
           "tokenize_prompt", "prompt_logprobs"]

#: a token the target accepted from the draft, or one it sampled itself
DRAFT, TARGET = "draft", "target"

StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


@dataclass
class Chunk:
    """One piece of streamed output.

    Attributes:
        text: the new text (held back while it may begin a stop string).
        tokens: the new tokens; they end where the text ends (a stop string
            cuts them as target-only decoding would).
        origins: per token, ``"draft"`` (proposed by the draft, kept by the
            target) or ``"target"`` (sampled by the target: after a
            rejection, or the bonus token).
        finish_reason: None while going on; "stop" (end of generation, a stop
            string or a stopping criterion) or "length" at the end.
        stats: the running statistics.
        eog_token: on a "stop" at an end-of-generation token, that token.
        logprobs: with ``logprobs`` asked for, per token its log-probability
            and the most likely alternatives ``[(token, logprob), ...]``,
            under the processed target distribution (the processor applied,
            before temperature and filters).
        pieces: ``text`` split by origin: ``(text, origin)`` pairs, each the
            text that became safe to show when a token arrived (text held
            back for a stop string goes with the token that released it).
        n_drafted, n_accepted: this target pass's draft length and how many
            of its drafts were kept (a chunk is one pass).
        stop_word: on a "stop" at a stop string, that string.
    """

    text: str
    tokens: list[int]
    finish_reason: str | None
    stats: GenerationStats
    origins: list[str] = field(default_factory=list)
    eog_token: int | None = None
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)
    pieces: list[tuple[str, str]] = field(default_factory=list)
    n_drafted: int = 0
    n_accepted: int = 0
    stop_word: str | None = None


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    origins: list[str] = field(default_factory=list)
    eog_token: int | None = None


def tokenize_prompt(engine: SpeculativeEngine, prompt: str | Sequence[int]) -> list[int]:
    """The prompt as token ids, checked: valid text or ids in the
    vocabulary, not empty, and leaving room in the context."""
    target = engine.target
    if isinstance(prompt, str):
        tokens = target.tokenize(check_prompt_text(prompt))  # type: ignore[attr-defined]
    elif isinstance(prompt, (list, tuple, np.ndarray)):
        tokens = check_prompt_tokens(prompt, target.n_vocab)
    else:
        raise SpecLlamaError(f"the prompt must be a string or a list of token ids, got {type(prompt).__name__}",
                             param="prompt")
    if not tokens:
        raise SpecLlamaError("the prompt is empty: it holds no token; give it some text", param="prompt")
    if target.n_ctx < 2:
        raise SpecLlamaError(f"a context of {target.n_ctx} token (-c/--ctx-size) cannot hold a prompt and a new "
                             "token: use -c 2 or more", param="prompt", code="context_length_exceeded")
    if len(tokens) >= target.n_ctx:
        raise SpecLlamaError(
            f"the prompt is {len(tokens)} tokens but the context (-c/--ctx-size) holds {target.n_ctx}: "
            f"use a prompt of at most {target.n_ctx - 1} tokens or a larger context", param="prompt",
            code="context_length_exceeded")
    return tokens


PROMPT_ROWS = 64  # prompt rows scored per target decode: each holds n_vocab logits in memory (64 MB on Gemma's)


def prompt_logprobs(engine: SpeculativeEngine, prompt_tokens: Sequence[int],
                    n: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """Each prompt token's log-probability after those before it, and the ``n`` likeliest alternatives, under the
    target's own distribution (no processor: OpenAI's ``echo`` with ``logprobs``), for tokens 1 .. end (the first
    follows nothing). The prompt but its last token is evaluated afresh with a row each, ``PROMPT_ROWS`` at a time;
    the target's cache then holds it, as :meth:`SpeculativeEngine.prefill` leaves it."""
    target = engine.target
    body = list(prompt_tokens[:-1])
    target.rewind(0)
    out = []
    for start in range(0, len(body), PROMPT_ROWS):
        piece = body[start:start + PROMPT_ROWS]
        for j, row in enumerate(target.eval(piece, n_logits=len(piece))):
            out.append(top_logprobs(row, prompt_tokens[start + j + 1], n))
    return out


def _decode_seconds(model: object) -> float:
    return getattr(model, "decode_seconds", 0.0) if model is not None else 0.0


def stream_generate(
    engine: SpeculativeEngine,
    prompt: str | Sequence[int],
    options: GenerationOptions | None = None,
    *,
    rng: np.random.Generator | None = None,
    invalid_utf8: str = "replace",
    **changes: object,
) -> Iterator[Chunk]:
    """Generate text after ``prompt``, streaming it as it is accepted.

    Args:
        engine: the target/draft pair.
        prompt: text (tokenized with the target's tokenizer) or token ids.
        options: the generation options (:class:`~specllama.options.GenerationOptions`;
            default: its defaults). Either way the output has the target's
            distribution; only a fixed draft length (``adaptive=False``)
            replays a seed token for token at temperature > 0, since adaptive
            choices follow timings.
        rng: the random generator (default: one made from ``options.params.seed``).
        invalid_utf8: "replace" (U+FFFD) or "ignore" (llama-cpp-python's choice).
        **changes: fields of ``options`` to change for this call (``params=``,
            ``draft_max=``, ``max_tokens=``, ...), checked as the record checks them.

    Yields:
        :class:`Chunk` objects; the last has a finish_reason and the final stats.
    """
    o = replace(options or GenerationOptions(), **changes)
    processor, stopping_criteria, logprobs = o.processor, o.stopping_criteria, o.logprobs
    if rng is None:
        rng = np.random.default_rng(o.params.seed)
    prompt_tokens = tokenize_prompt(engine, prompt)
    target = engine.target
    stats = GenerationStats(n_prompt_tokens=len(prompt_tokens))
    text = TextAssembler(o.stop, errors=invalid_utf8)
    t_start = time.perf_counter()
    # the draft is fed only while the policy drafts: decoding target-only, it catches up lazily when drafting resumes
    stats.n_prompt_evaluated = engine.prefill(prompt_tokens, draft=engine.feeds_draft(o.draft_max, o.adaptive))
    t_decode = time.perf_counter()
    stats.prompt_seconds = t_decode - t_start
    d0, t0 = _decode_seconds(engine.draft), _decode_seconds(target)
    seq = list(prompt_tokens)
    constraint = None
    if o.grammar is not None:
        constraint = LLGuidanceConstraint(o.grammar, target.grammar_tokenizer(), target.n_vocab)
    steps = engine.steps(prompt_tokens, params=o.params, draft_max=o.draft_max, max_tokens=o.max_tokens, rng=rng,
                         adaptive=o.adaptive, processor=processor, draft_min=o.draft_min, rule=o.rule,
                         constraint=constraint, forced_drafts=o.forced_drafts)
    try:
        for step in steps:
            stats.observe_pass(step.n_drafted, step.n_accepted, forced=step.n_forced > 0,
                               lookup=step.n_looked_up > 0)
            delta, tokens, origins, lps, pieces = "", [], [], [], []
            finish, eog = step.finish_reason, step.eog_token
            for j, tok in enumerate(step.tokens):
                if logprobs is not None and step.target_logits is not None:
                    # from the distribution the token was drawn from: processed, then masked by the grammar
                    row = processed(step.target_logits[j], seq, processor)
                    lps.append(top_logprobs(masked(row, step.masks[j] if step.masks else None), tok, logprobs))
                tokens.append(tok)
                origins.append(DRAFT if j < step.n_accepted else TARGET)
                seq.append(tok)
                piece = text.push(target.token_bytes(tok))  # type: ignore[attr-defined]
                delta += piece
                if piece:
                    pieces.append((piece, origins[-1]))
                if text.stopped or (stopping_criteria is not None and step.target_logits is not None
                                    and stopping_criteria(np.asarray(seq, dtype=np.intc), step.target_logits[j])):
                    # the tokens end where the text ends: the rest of this pass is dropped
                    finish, eog = "stop", None
                    break
            stats.n_tokens += len(tokens)
            stats.draft_seconds += step.draft_seconds
            stats.verify_seconds += step.verify_seconds
            stats.seconds = time.perf_counter() - t_decode
            stats.draft_decode_seconds = _decode_seconds(engine.draft) - d0
            stats.target_decode_seconds = _decode_seconds(target) - t0
            if constraint is not None:
                stats.grammar_seconds = constraint.seconds
            if not stats.ttft_seconds and tokens:
                stats.ttft_seconds = stats.prompt_seconds + stats.seconds
            if finish is not None:
                rest = text.flush()
                if rest:
                    delta += rest
                    pieces.append((rest, origins[-1] if origins else TARGET))
                yield Chunk(delta, tokens, finish, stats, origins, eog, lps, pieces, step.n_drafted, step.n_accepted,
                            text.stop_word)
                return
            if delta or tokens:
                yield Chunk(delta, tokens, None, stats, origins, logprobs=lps, pieces=pieces,
                            n_drafted=step.n_drafted, n_accepted=step.n_accepted)
    finally:
        steps.close()


def generate(engine: SpeculativeEngine, prompt: str | Sequence[int], options: GenerationOptions | None = None,
             **kwargs) -> GenerationResult:
    """Run :func:`stream_generate` to the end and collect the result."""
    pieces: list[str] = []
    tokens: list[int] = []
    origins: list[str] = []
    chunk = None
    for chunk in stream_generate(engine, prompt, options, **kwargs):
        pieces.append(chunk.text)
        tokens.extend(chunk.tokens)
        origins.extend(chunk.origins)
    assert chunk is not None and chunk.finish_reason is not None
    return GenerationResult("".join(pieces), tokens, chunk.finish_reason, chunk.stats, origins, chunk.eog_token)
