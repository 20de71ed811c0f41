"""OpenAI-style error objects, and the mapping from what went wrong to them.

Every error the server returns is ``{"error": {"message", "type", "param",
"code"}}`` with a 4xx or 5xx status. Value checks are not made here: the API
(:mod:`specllama.options`, the one validator) raises ``ValueError`` naming
the option, and :func:`from_value_error` only finds the field in that
message and picks the status and code.
"""

from __future__ import annotations

import re
from typing import Mapping

INVALID = "invalid_request_error"
SERVER = "server_error"

# the start of the API's message for a prompt that does not fit (generate.tokenize_prompt)
CONTEXT_EXCEEDED = "the prompt is "
CONTEXT_MARK = "but the context (-c/--ctx-size) holds"
_LEADING_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)((?:\[[^\]]*\])*)")


class ApiError(Exception):
    """An error answered as an OpenAI error object."""

    def __init__(self, status: int, message: str, *, type: str = INVALID, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def from_value_error(error: ValueError, *, fields: set[str], prompt_field: str,
                     renames: Mapping[str, str] | None = None, refusable: set[str] = frozenset()) -> ApiError:
    """A 400 for a ``ValueError`` raised by the API on a request's values.

    Args:
        error: its message starts with the option's name (``"temperature must
            be ..."``, ``"stop[0] must be ..."``, ``"messages[2] has role ..."``)
            or with ``"the prompt"``.
        fields: the request's field names (others in the message are not params).
        prompt_field: "prompt" or "messages".
        renames: API name -> the request's name for it (``draft_max`` ->
            ``speculative.n_max``); the message is reworded to match.
        refusable: fields refused unless neutral (their code is ``unsupported_parameter``).
    """
    message = str(error)
    if isinstance(error, UnicodeError):  # text JSON can carry but UTF-8 cannot (a lone surrogate)
        return not_utf8(prompt_field, error)
    if message.startswith(CONTEXT_EXCEEDED) and CONTEXT_MARK in message:
        return ApiError(400, message, param=prompt_field, code="context_length_exceeded")
    if message.startswith("the prompt"):
        return ApiError(400, message, param=prompt_field, code="invalid_value")
    m = _LEADING_NAME.match(message)
    name = m.group(1) if m else ""
    if renames and name in renames:
        message = renames[name] + message[len(name):]
        name = renames[name]
    if name not in fields:
        return ApiError(400, message, code="invalid_value")
    code = "unsupported_parameter" if name in refusable else "invalid_value"
    return ApiError(400, message, param=name + (m.group(2) if m else ""), code=code)


def not_utf8(field: str, error: UnicodeError) -> ApiError:
    return ApiError(400, f"{field} must be valid UTF-8 text ({error})", param=field, code="invalid_value")


def internal_error() -> ApiError:
    """What a client sees of a bug: no internals (the traceback goes to the log)."""
    return ApiError(500, "internal server error (the server log has the details)", type=SERVER,
                    code="internal_error")


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type=SERVER, code="shutting_down")
