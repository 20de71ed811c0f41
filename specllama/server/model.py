"""The served model: ``SpeculativeLlama`` that also hands over the
statistics record of each generation.

The server needs, per request, what the API's dicts do not carry: the
per-position draft counts behind ``acceptance_by_position`` (for exact
Prometheus counters), the prompt tokens the target evaluated, the decoding
time, and all of it for a generation its client abandoned. That is the one
statistics record, :class:`~specllama.stats.GenerationStats`; this subclass
keeps the latest. (Until ``SpeculativeLlama`` exposes it itself; then this
module is ``SpeculativeLlama``.)
"""

from __future__ import annotations

from typing import Iterator

from ..api import SpeculativeLlama
from ..generate import Chunk
from ..stats import GenerationStats


class ServedLlama(SpeculativeLlama):
    """A :class:`SpeculativeLlama` that records the statistics of its latest
    generation (one runs at a time, so "latest" is "current")."""

    _last_stats: GenerationStats | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The target's token_bytes writes into one shared ctypes buffer before caching a
        # piece; the worker (text assembly) and the request threads (/detokenize, token
        # prompts) call it concurrently. Decoding every token once now, before any of
        # those threads exists, fills the cache, so no later call touches the buffer
        # (0.4 s for a 262k vocabulary). Not needed once the backend uses a buffer per call.
        self.detokenize(range(self.engine.target.n_vocab))

    def take_stats(self) -> GenerationStats | None:
        """The statistics of the generation that just ended (None if it
        ended before its first target pass), forgotten once taken."""
        stats, self._last_stats = self._last_stats, None
        return stats

    def _stream(self, prompt_tokens: list[int], kwargs: dict) -> Iterator[Chunk]:
        inner = super()._stream(prompt_tokens, kwargs)
        try:
            for chunk in inner:
                self._last_stats = chunk.stats  # one record, updated in place to the end
                yield chunk
        finally:
            inner.close()  # a closed stream stops its generation now, not at garbage collection

