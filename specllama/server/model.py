"""The served model: ``SpeculativeLlama`` that also hands over the
statistics record of each generation.

The server needs, per request, what the API's dicts do not all carry: the
prompt length of a stream (OpenAI's ``include_usage``), and the per-position
draft counts behind ``acceptance_by_position`` (exact Prometheus counters).
Both are in :class:`~specllama.stats.GenerationStats`, the one statistics
record; this subclass keeps the latest one. (Until ``SpeculativeLlama``
exposes it itself; then this module is ``SpeculativeLlama``.)
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


def usage(stats: GenerationStats) -> dict:
    """OpenAI's ``usage`` object of a generation."""
    return {"prompt_tokens": stats.n_prompt_tokens, "completion_tokens": stats.n_tokens,
            "total_tokens": stats.n_prompt_tokens + stats.n_tokens}
