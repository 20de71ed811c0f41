"""Can this draft model speak for this target model? Pure checks, no llama.cpp.

The rules follow llama.cpp's ``common_speculative_are_compatible``: the same
vocabulary type, the same BOS/EOS ids, sizes that differ by no more than a
padding margin, and identical token text on every id the two share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import SpecLlamaError

MAX_VOCAB_SIZE_DIFFERENCE = 128


@dataclass(frozen=True)
class VocabInfo:
    """What the compatibility check needs to know of one model's vocabulary."""

    path: str
    vocab_type: int
    bos: int
    eos: int
    tokens: Sequence[bytes]

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def first_difference(a: Sequence[bytes], b: Sequence[bytes]) -> int | None:
    """The first id below min(len(a), len(b)) whose text differs, or None."""
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return None


def check_compatible(target: VocabInfo, draft: VocabInfo) -> None:
    """Raise :class:`SpecLlamaError` naming both files if ``draft`` cannot
    draft for ``target``; return None when it can."""
    pair = f"draft {draft.path!r} does not match target {target.path!r}"
    if target.vocab_type != draft.vocab_type:
        raise SpecLlamaError(f"{pair}: vocabulary type {draft.vocab_type} != {target.vocab_type}")
    if target.bos != draft.bos:
        raise SpecLlamaError(f"{pair}: BOS id {draft.bos} != {target.bos}")
    if target.eos != draft.eos:
        raise SpecLlamaError(f"{pair}: EOS id {draft.eos} != {target.eos}")
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        raise SpecLlamaError(
            f"{pair}: vocabulary sizes {draft.n_vocab} and {target.n_vocab} differ by {diff} "
            f"(at most {MAX_VOCAB_SIZE_DIFFERENCE} is accepted)"
        )
    i = first_difference(target.tokens, draft.tokens)
    if i is not None:
        raise SpecLlamaError(
            f"{pair}: token {i} is {draft.tokens[i]!r} in the draft but {target.tokens[i]!r} in the target"
        )
