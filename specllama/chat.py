"""A conversation over the engine: chat templates, history, context budget.

The prompt comes from the target GGUF's own chat template (its
``tokenizer.chat_template``, rendered by llama-cpp-python's Jinja formatter),
or from one of llama-cpp-python's named formats. Each turn re-uses what both
KV caches already hold: the history is kept as the tokens that were actually
evaluated, and only the new text is tokenized and evaluated.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from .errors import SpecLlamaError
from .generate import Chunk, GenerationStats, stream_generate
from .sampling import SamplingParams

FALLBACK_CHAT_FORMAT = "chatml"
# For GGUF files without a template: the format their family uses.
FORMAT_BY_ARCHITECTURE = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "qwen2": "chatml", "qwen3": "chatml"}
DEFAULT_REPLY_RESERVE = 512


@dataclass
class Rendered:
    text: str
    stop: list[str]
    has_bos: bool  # the text already starts with the BOS token


Formatter = Callable[[list[dict]], Rendered]


def named_chat_formats() -> dict[str, Callable]:
    """llama-cpp-python's registered chat formats, by name."""
    from llama_cpp import llama_chat_format as lcf

    source = inspect.getsource(lcf)
    pairs = re.findall(r'@register_chat_format\("([^"]+)"\)\s*\ndef (\w+)\(', source)
    return {name: getattr(lcf, fn) for name, fn in pairs if hasattr(lcf, fn)}


def make_formatter(model, chat_format: str | None = None) -> tuple[Formatter, str]:
    """The chat formatter for ``model`` (a backend.LlamaModel).

    Args:
        model: the target model, whose GGUF metadata may hold a template.
        chat_format: a llama-cpp-python format name, overriding the template.

    Returns:
        the formatter and a short description of where it came from.
    """
    from llama_cpp import llama_chat_format as lcf

    if chat_format is None:
        template = model.llama.metadata.get("tokenizer.chat_template")
        if template:
            bos = model.detokenize_special(model.bos)
            eos = model.detokenize_special(model.eos)
            jinja = lcf.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

            def from_template(messages: list[dict]) -> Rendered:
                r = jinja(messages=messages)
                stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
                return Rendered(r.prompt, [s for s in stop if s], r.prompt.startswith(bos) if bos else False)

            return from_template, "the model's chat template"
    formats = named_chat_formats()
    arch = model.llama.metadata.get("general.architecture", "")
    name = chat_format or FORMAT_BY_ARCHITECTURE.get(arch, FALLBACK_CHAT_FORMAT)
    if name not in formats:
        raise SpecLlamaError(
            f"unknown chat format {name!r}; known: {', '.join(sorted(formats))}"
        )
    fn = formats[name]

    def from_named(messages: list[dict]) -> Rendered:
        r = fn(messages=messages)
        stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
        return Rendered(r.prompt, [s for s in stop if s], False)

    origin = f"chat format {name!r}" if chat_format else f"no chat template in the model; using {name!r} (--chat-format to change)"
    return from_named, origin


@dataclass
class Turn:
    """One reply in the making: iterate it for the chunks.

    Attributes:
        dropped: how many old turns were dropped to fit the context.
    """

    dropped: int
    chunks: Iterator[Chunk]

    def __iter__(self) -> Iterator[Chunk]:
        return self.chunks


@dataclass
class ChatSession:
    """The conversation state and the one way to add a turn to it.

    Args:
        engine: the target/draft pair.
        formatter: from :func:`make_formatter`.
        system_prompt: the first message, never dropped (None: none).
        params, draft_max, max_tokens: as for ``stream_generate``.
        reply_reserve: context tokens kept free for the reply.
    """

    engine: object
    formatter: Formatter
    system_prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    draft_max: int = 4
    max_tokens: int | None = None
    reply_reserve: int = DEFAULT_REPLY_RESERVE
    adaptive: bool = True
    messages: list[dict] = field(default_factory=list)
    last_stats: GenerationStats | None = None
    total_stats: GenerationStats = field(default_factory=GenerationStats)
    n_turns: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.params.seed)
        # what the caches hold after the last turn, as text and as tokens
        self._held_text = ""
        self._held_tokens: list[int] = []
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays)."""
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self._held_text, self._held_tokens = "", []

    def set_system(self, text: str) -> None:
        """Replace the system prompt (kept through /reset and context trimming)."""
        self.system_prompt = text or None
        rest = [m for m in self.messages if m["role"] != "system"]
        self.messages = ([{"role": "system", "content": text}] if text else []) + rest

    def _tokens_for(self, rendered: Rendered) -> list[int]:
        target = self.engine.target
        if self._held_tokens and rendered.text.startswith(self._held_text):
            # the history as it was evaluated, plus only the new text
            return self._held_tokens + target.tokenize(rendered.text[len(self._held_text):], add_bos=False)
        return target.tokenize(rendered.text, add_bos=not rendered.has_bos)

    def _fit(self) -> tuple[Rendered, list[int], int]:
        """Render the conversation, dropping the oldest turns until it leaves
        ``reply_reserve`` tokens of the context free."""
        n_ctx = self.engine.target.n_ctx
        reserve = min(self.reply_reserve, n_ctx // 2)
        if self.max_tokens is not None:
            reserve = min(reserve, self.max_tokens)
        dropped = 0
        while True:
            rendered = self.formatter(self.messages)
            tokens = self._tokens_for(rendered)
            if len(tokens) + reserve <= n_ctx:
                return rendered, tokens, dropped
            first = next((i for i, m in enumerate(self.messages) if m["role"] != "system"), None)
            if first is None or first == len(self.messages) - 1:
                raise SpecLlamaError(
                    f"this message needs {len(tokens)} tokens with the system prompt, and the context "
                    f"(-c/--ctx-size {n_ctx}) keeps {reserve} free for the reply: shorten it or raise -c"
                )
            # drop the oldest exchange: a user message and the reply to it
            del self.messages[first]
            if first < len(self.messages) - 1 and self.messages[first]["role"] == "assistant":
                del self.messages[first]
            dropped += 1

    def send(self, text: str) -> Turn:
        """Add the user's message; return the reply as a :class:`Turn`.

        The reply enters the history when iteration ends, also when it is cut
        short (Ctrl-C): what was shown is what is remembered.
        """
        self.messages.append({"role": "user", "content": text})
        try:
            rendered, tokens, dropped = self._fit()
        except SpecLlamaError:
            self.messages.pop()
            raise
        return Turn(dropped, self._reply(rendered, tokens))

    def _reply(self, rendered: Rendered, prompt_tokens: list[int]) -> Iterator[Chunk]:
        pieces: list[str] = []
        reply_tokens: list[int] = []
        stats = None
        try:
            for chunk in stream_generate(
                self.engine,
                prompt_tokens,
                params=self.params,
                draft_max=self.draft_max,
                max_tokens=self.max_tokens,
                stop=rendered.stop,
                rng=self.rng,
                adaptive=self.adaptive,
            ):
                pieces.append(chunk.text)
                reply_tokens.extend(chunk.tokens)
                stats = chunk.stats
                yield chunk
        finally:
            reply = "".join(pieces)
            self.messages.append({"role": "assistant", "content": reply})
            target = self.engine.target
            if target.detokenize(reply_tokens) == reply:
                self._held_text = rendered.text + reply
                self._held_tokens = prompt_tokens + reply_tokens
            else:  # a stop string or a cut: the tokens say more than the text
                self._held_text, self._held_tokens = "", []
            if stats is not None:
                self.last_stats = stats
                self.total_stats = self.total_stats + stats
            self.n_turns += 1
