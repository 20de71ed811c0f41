"""Text in, text out: the engine's steps as text chunks with running stats.

``stream_generate`` is the one consumer of :meth:`SpeculativeEngine.steps`
that knows about text; ``generate`` collects it. The CLI (and later the chat
REPL, the bench and the OpenAI-shaped API) consume these.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .sampling import SamplingParams
from .text import TextAssembler

DEFAULT_DRAFT_MAX = 4
DEFAULT_MAX_TOKENS = 128


@dataclass
class GenerationStats:
    """Counts and timings of one generation."""

    n_prompt_tokens: int = 0
    n_prompt_evaluated: int = 0
    n_tokens: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_target_passes: int = 0
    prompt_seconds: float = 0.0
    ttft_seconds: float = 0.0
    seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (0 when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of decoding (prompt processing excluded)."""
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Mean tokens emitted per target forward pass."""
        return self.n_tokens / self.n_target_passes if self.n_target_passes else 0.0

    def __add__(self, other: "GenerationStats") -> "GenerationStats":
        """Totals over several generations (a chat session's, say)."""
        return GenerationStats(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            tokens_per_second=self.tokens_per_second,
            tokens_per_pass=self.tokens_per_pass,
        )
        return d

    def summary(self) -> str:
        """The one-line stats a user reads after a generation."""
        return (
            f"{self.n_tokens} tokens, {self.tokens_per_second:.1f} tok/s, "
            f"drafted {self.n_drafted}, accepted {self.n_accepted} "
            f"({100 * self.acceptance_rate:.1f}%), "
            f"{self.tokens_per_pass:.2f} tokens/target pass"
        )


@dataclass
class Chunk:
    """One piece of streamed output."""

    text: str
    tokens: list[int]
    finish_reason: str | None
    stats: GenerationStats


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str
    stats: GenerationStats = field(default_factory=GenerationStats)


def tokenize_prompt(engine: SpeculativeEngine, prompt: str | Sequence[int]) -> list[int]:
    """The prompt as token ids, checked to leave room in the context."""
    target = engine.target
    tokens = target.tokenize(prompt) if isinstance(prompt, str) else list(prompt)  # type: ignore[attr-defined]
    if not tokens:
        raise SpecLlamaError("the prompt is empty (give some text with -p/--prompt)")
    if len(tokens) >= target.n_ctx:
        raise SpecLlamaError(
            f"the prompt is {len(tokens)} tokens but the context (-c/--ctx-size) holds {target.n_ctx}: "
            f"use a prompt under {target.n_ctx} tokens or a larger context"
        )
    return tokens


def stream_generate(
    engine: SpeculativeEngine,
    prompt: str | Sequence[int],
    *,
    params: SamplingParams = SamplingParams(),
    draft_max: int = DEFAULT_DRAFT_MAX,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    stop: Sequence[str] = (),
    rng: np.random.Generator | None = None,
    adaptive: bool = True,
) -> Iterator[Chunk]:
    """Generate text after ``prompt``, streaming it as it is accepted.

    Args:
        engine: the target/draft pair.
        prompt: text (tokenized with the target's tokenizer) or token ids.
        params: sampling transforms; ``params.seed`` seeds the generator.
        draft_max: draft tokens per target pass (0: target only); the cap
            when ``adaptive``.
        max_tokens: the most tokens to generate (None: until the context is full).
        stop: strings that end generation; they are not part of the output.
        rng: the random generator (default: one made from ``params.seed``).
        adaptive: pick each pass's draft length from measured costs (True),
            or always draft ``draft_max`` (False). Either way the output has
            the target's distribution; only a fixed length replays a seed
            token for token at temperature > 0, since adaptive choices follow
            timings.

    Yields:
        :class:`Chunk` objects; the last has a finish_reason ("stop" or
        "length") and the final stats.
    """
    if rng is None:
        rng = np.random.default_rng(params.seed)
    prompt_tokens = tokenize_prompt(engine, prompt)
    stats = GenerationStats(n_prompt_tokens=len(prompt_tokens))
    text = TextAssembler(stop)
    t_start = time.perf_counter()
    stats.n_prompt_evaluated = engine.prefill(prompt_tokens, draft=draft_max > 0)
    t_decode = time.perf_counter()
    stats.prompt_seconds = t_decode - t_start
    steps = engine.steps(prompt_tokens, params=params, draft_max=draft_max, max_tokens=max_tokens, rng=rng,
                         adaptive=adaptive)
    try:
        for step in steps:
            stats.n_tokens += len(step.tokens)
            stats.n_drafted += step.n_drafted
            stats.n_accepted += step.n_accepted
            stats.n_target_passes += 1
            stats.draft_seconds += step.draft_seconds
            stats.verify_seconds += step.verify_seconds
            stats.seconds = time.perf_counter() - t_decode
            if not stats.ttft_seconds and step.tokens:
                stats.ttft_seconds = stats.prompt_seconds + stats.seconds
            delta = "".join(text.push(engine.target.token_bytes(t)) for t in step.tokens)  # type: ignore[attr-defined]
            finish = "stop" if text.stopped else step.finish_reason
            if finish is not None:
                delta += text.flush()
                yield Chunk(delta, step.tokens, finish, stats)
                return
            if delta or step.tokens:
                yield Chunk(delta, step.tokens, None, stats)
    finally:
        steps.close()


def generate(engine: SpeculativeEngine, prompt: str | Sequence[int], **kwargs) -> GenerationResult:
    """Run :func:`stream_generate` to the end and collect the result."""
    pieces: list[str] = []
    tokens: list[int] = []
    chunk = None
    for chunk in stream_generate(engine, prompt, **kwargs):
        pieces.append(chunk.text)
        tokens.extend(chunk.tokens)
    assert chunk is not None and chunk.finish_reason is not None
    return GenerationResult("".join(pieces), tokens, chunk.finish_reason, chunk.stats)
