"""The one exception a user's own input can cause."""

from __future__ import annotations

INVALID_VALUE = "invalid_value"


def short_repr(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SpecLlamaError(ValueError):
    """Bad input (a file, a flag, a prompt): the message names the bad value and
    what would be accepted, in one line, fit to show a user as it is.

    Attributes:
        param: the option or field at fault, as the Python API names it
            (nested: ``stop[1]``, ``messages[2].content``,
            ``response_format.json_schema.schema``); None for input that is
            no option (a model file).
        code: why, as an OpenAI error code: ``invalid_value`` (the default),
            ``unsupported_parameter`` (an option refused unless neutral),
            ``context_length_exceeded``.
    """

    def __init__(self, message: str, *, param: str | None = None, code: str = INVALID_VALUE) -> None:
        super().__init__(message)
        self.param, self.code = param, code


class ContextFull(SpecLlamaError):
    """Tokens that do not fit a sequence's context, or the KV cache that
    parallel sequences share: a generation ends there with "length"."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="context_length_exceeded")


class SpecLlamaWarning(UserWarning):
    """A setting that works but probably not as meant (``--rpc`` with
    ``-ngl 0``, ...); the CLI shows it as one ``Warning: ...`` line."""
