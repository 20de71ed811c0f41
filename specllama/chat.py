"""A conversation over the engine: history, context budget, one reply at a time.

The prompt comes from :mod:`specllama.chat_template` (the target GGUF's own
template, or a named format). Each turn re-uses what both KV caches already
hold: the history is kept as the tokens that were actually evaluated, and
only the new text is tokenized and evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from .chat_template import ChatTemplate, Rendered
from .errors import SpecLlamaError
from .generation import Chunk, stream_generate
from .options import GenerationOptions
from .stats import GenerationStats
from .text import check_prompt_text

DEFAULT_REPLY_RESERVE = 512


def template_for(model, chat_format: str | None = None) -> ChatTemplate:
    """The chat template of a loaded target (a backend.LlamaModel)."""
    from .chat_template import chat_template_for

    try:
        return chat_template_for(model.metadata, bos_token=model.bos_text, eos_token=model.eos_text,
                                 chat_format=chat_format)
    except ValueError as e:
        raise SpecLlamaError(str(e)) from None


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


class ChatSession:
    """The conversation state and the one way to add a turn to it.

    Args:
        engine: the target/draft pair.
        template: from :func:`template_for`.
        system_prompt: the first message, never dropped (None: none).
        options: the generation options of every reply
            (:class:`~specllama.options.GenerationOptions`; default: its
            defaults, with replies until the model stops).
        reply_reserve: context tokens kept free for the reply.
        **changes: fields of ``options`` to change (``params=``, ``max_tokens=``, ...).
    """

    def __init__(self, engine: object, template: ChatTemplate, system_prompt: str | None = None,
                 options: GenerationOptions | None = None, *, reply_reserve: int = DEFAULT_REPLY_RESERVE,
                 **changes: object) -> None:
        self.engine, self.template = engine, template
        self.system_prompt = check_prompt_text(system_prompt, "system prompt") if system_prompt else system_prompt
        self.options = replace(options or GenerationOptions(max_tokens=None), **changes)
        self.reply_reserve = reply_reserve
        self.messages: list[dict] = []
        self.last_stats: GenerationStats | None = None
        self.last_finish: str | None = None
        self.total_stats = GenerationStats()
        self.n_turns = 0
        self.rng = np.random.default_rng(self.options.params.seed)
        # what the caches hold after the last turn, as text and as tokens
        self._held_text = ""
        self._held_tokens: list[int] = []
        self.reset()

    @property
    def max_tokens(self) -> int | None:
        return self.options.max_tokens

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays)."""
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self._held_text, self._held_tokens = "", []

    def set_system(self, text: str) -> None:
        """Replace the system prompt (kept through /reset and context trimming)."""
        check_prompt_text(text, "system prompt")
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
            rendered = self.template.render(self.messages)
            tokens = self._tokens_for(rendered)
            if len(tokens) + reserve <= n_ctx:
                return rendered, tokens, dropped
            first = next((i for i, m in enumerate(self.messages) if m["role"] != "system"), None)
            if first is None or first == len(self.messages) - 1:
                with_system = " with the system prompt" if self.system_prompt else ""
                raise SpecLlamaError(
                    f"this message needs {len(tokens)} tokens{with_system}, and the context "
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
        self.messages.append({"role": "user", "content": check_prompt_text(text, "message")})
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
        self.last_finish = None
        try:
            for chunk in stream_generate(self.engine, prompt_tokens, self.options,
                                         stop=self.options.stop + tuple(rendered.stop), rng=self.rng):
                pieces.append(chunk.text)
                reply_tokens.extend(chunk.tokens)
                stats = chunk.stats
                self.last_finish = chunk.finish_reason
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
