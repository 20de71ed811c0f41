"""Fill in the middle: the prompt a code editor's request stands for, in a
model's FIM tokens, as llama-server assembles it.

For a request with ``input_prefix``, ``input_suffix``, the current line
``prompt`` and ``input_extra`` chunks (``{"text", "filename"}``), the tokens
are (Qwen2.5-Coder's repository-level format where the vocabulary has its
``<|repo_name|>``/``<|file_sep|>`` tokens)::

    <|repo_name|>myproject\\n <|file_sep|>{filename}\\n{text} ... <|file_sep|>filename\\n
    [BOS] <|fim_prefix|>{prefix}{prompt}<|fim_suffix|>{suffix}<|fim_middle|>

The prefix keeps its last 3/4 of a batch, the suffix its first quarter less
the prompt and two tokens, and the chunks (the end of them) what is left of
the context after a batch and twice the tokens to predict. Without a file
separator each chunk is preceded by ``"\\n\\n--- snippet ---\\n\\n"``. Text is
tokenized without parsing special tokens, so a file's text cannot inject one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Sequence

from .errors import SpecLlamaError

REPO = "myproject"
SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's fill-in-the-middle tokens; ``bos`` when it adds one."""

    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None
    bos: int | None = None


@dataclass(frozen=True)
class Chunk:
    text: str
    filename: str = "tmp"


def check_extra(extra: object, param: str = "input_extra") -> list[Chunk]:
    """``input_extra`` checked: a list of ``{"text": str, "filename"?: str}``
    (other keys, such as llama.vim's ``time``, are ignored)."""
    if extra is None:
        return []
    if not isinstance(extra, (list, tuple)):
        raise SpecLlamaError(f"{param} must be a list of {{'text': ..., 'filename': ...}} chunks, got "
                             f"{type(extra).__name__}", param=param)
    out = []
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, Mapping) or not isinstance(chunk.get("text"), str):
            raise SpecLlamaError(f"{param}[{i}] must be an object with a string 'text', got {chunk!r:.60}",
                                 param=f"{param}[{i}].text")
        filename = chunk.get("filename", "tmp")
        if not isinstance(filename, str):
            raise SpecLlamaError(f"{param}[{i}].filename must be a string, got {filename!r:.60}",
                                 param=f"{param}[{i}].filename")
        out.append(Chunk(chunk["text"], filename))
    return out


def fim_prompt(tokenize: Callable[[str], list[int]], fim: FimTokens, *, prefix: str, suffix: str,
               prompt: str = "", extra: Sequence[Chunk] = (), n_batch: int, n_ctx: int,
               n_predict: int) -> list[int]:
    """The prompt's tokens (see the module doc). ``tokenize`` turns text into
    ids without BOS and without parsing special tokens."""
    extra_tokens: list[int] = []
    if fim.rep is not None:
        extra_tokens += [fim.rep] + tokenize(f"{REPO}\n")
    for chunk in extra:
        extra_tokens += [fim.sep] + tokenize(f"{chunk.filename}\n") if fim.sep is not None else tokenize(SNIPPET)
        extra_tokens += tokenize(chunk.text)
    if fim.sep is not None:
        extra_tokens += [fim.sep] + tokenize("filename\n")
    head, tail, line = tokenize(prefix), tokenize(suffix), tokenize(prompt)
    n_head = min(len(head), 3 * (n_batch // 4))
    n_tail = min(len(tail), max(0, n_batch // 4 - (2 + len(line))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * max(n_predict, 0)), len(extra_tokens))
    # llama-server's order: the chunks, then BOS (where the model adds one), then the prefix
    tokens = extra_tokens[len(extra_tokens) - n_extra:] + ([] if fim.bos is None else [fim.bos])
    tokens += [fim.pre] + head[len(head) - n_head:] + line
    tokens += [fim.suf] + tail[:n_tail] + [fim.mid]
    return tokens
