"""Token bytes to text: UTF-8 safe streaming and stop strings; text given as a prompt, checked."""

from __future__ import annotations

import codecs
from typing import Sequence

from .errors import SpecLlamaError


class TextAssembler:
    """Turn a stream of token byte pieces into text deltas.

    A character split over several tokens is held until it is whole, and text
    that might be the start of a stop string is held until it is known not
    to be one, so no delta ever has to be taken back.
    """

    def __init__(self, stop: Sequence[str] = (), *, errors: str = "replace") -> None:
        """Args: stop: stop strings; errors: what invalid UTF-8 becomes
        ("replace": U+FFFD, "ignore": nothing, as llama-cpp-python does)."""
        self._stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors)
        self._pending = ""
        self.stopped = False
        self.stop_word: str | None = None  # the stop string that ended the text, once one did

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to show.

        After a stop string is seen, ``stopped`` is True and the returned text
        ends just before it; later pushes return "".
        """
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        if not self._stop:
            out, self._pending = self._pending, ""
            return out
        # the earliest match, and of two at one place the first given
        cut, _, word = min(((i, k, s) for k, s in enumerate(self._stop) if (i := self._pending.find(s)) >= 0),
                           default=(-1, 0, None))
        if cut >= 0:
            self.stopped, self.stop_word = True, word
            out, self._pending = self._pending[:cut], ""
            return out
        hold = self._held_suffix_len()
        out = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold:]
        return out

    def flush(self) -> str:
        """The text still held at the end of generation (an incomplete
        character becomes U+FFFD)."""
        if self.stopped:
            return ""
        out = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return out

    def _held_suffix_len(self) -> int:
        """Length of the longest suffix of the pending text that begins a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._pending)), best, -1):
                if s.startswith(self._pending[-n:]):
                    best = n
                    break
        return best


def check_prompt_text(prompt: str, what: str = "prompt", param: str = "prompt") -> str:
    """A text prompt (or a chat's ``what``) must be valid Unicode that encodes as UTF-8 (a shell or a pipe can hand
    over raw bytes that do not, and JSON a lone surrogate)."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        try:
            raw = prompt[e.start:e.end].encode("utf-8", "surrogateescape")  # bytes a shell could not decode
        except UnicodeEncodeError:
            raw = prompt[e.start:e.end].encode("utf-8", "backslashreplace")  # a lone surrogate
        raise SpecLlamaError(
            f"the {what} is not valid UTF-8 (bytes {raw!r} at position {e.start}); give UTF-8 text", param=param
        ) from None
    return prompt
