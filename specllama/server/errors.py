"""OpenAI-style error objects, and the mapping from what went wrong to them.

Every error the server returns is ``{"error": {"message", "type", "param",
"code"}}`` with a 4xx or 5xx status. Value checks are not made here: the API
(:mod:`specllama.options`, the one validator) raises a
:class:`~specllama.errors.SpecLlamaError` that carries the option's name
(``param``) and why (``code``); :func:`from_value_error` only renames the
field to the request's name for it.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import INVALID_VALUE

INVALID = "invalid_request_error"
SERVER = "server_error"
#: the API's name for the prompt (the request's is "prompt" or "messages")
PROMPT = "prompt"


class ApiError(Exception):
    """An error answered as an OpenAI error object."""

    def __init__(self, status: int, message: str, *, type: str = INVALID, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def from_value_error(error: ValueError, *, prompt_field: str, renames: Mapping[str, str] | None = None) -> ApiError:
    """A 400 for a ``ValueError`` raised by the API on a request's values.

    Args:
        error: a ``SpecLlamaError`` names its field (``param``: ``temperature``,
            ``stop[0]``, ``messages[2].content``) and its ``code``; another
            ``ValueError`` has neither.
        prompt_field: the request's name for the prompt, "prompt" or "messages".
        renames: API name -> the request's name for it (``draft_max`` ->
            ``speculative.n_max``): the param, and the message that starts
            with the name, are said in the request's words.
    """
    if isinstance(error, UnicodeError):  # text JSON can carry but UTF-8 cannot (a lone surrogate)
        return not_utf8(prompt_field, error)
    message = str(error)
    param: str | None = getattr(error, "param", None)
    code: str = getattr(error, "code", None) or INVALID_VALUE
    if param is not None:
        head = param.split("[", 1)[0]
        if head == PROMPT:
            param = prompt_field + param[len(head):]
        elif renames and head in renames:
            if message.startswith(head):
                message = renames[head] + message[len(head):]
            param = renames[head] + param[len(head):]
    return ApiError(400, message, param=param, code=code)


def not_utf8(field: str, error: UnicodeError) -> ApiError:
    return ApiError(400, f"{field} must be valid UTF-8 text ({error})", param=field, code="invalid_value")


def internal_error() -> ApiError:
    """What a client sees of a bug: no internals (the traceback goes to the log)."""
    return ApiError(500, "internal server error (the server log has the details)", type=SERVER,
                    code="internal_error")


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type=SERVER, code="shutting_down")
