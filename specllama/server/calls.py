"""A request body to a ``SpeculativeLlama`` call, and its answer: the one
translation the HTTP server and ``specllama batch`` share.

A body is parsed into its request model (:mod:`.schemas`: JSON types
only); its fields become the API's keyword arguments under the server's
defaults; the API's call checks every value (``convention="openai"``) and
returns its chunk stream. A ``ValueError`` the API raises becomes an
OpenAI error object in the request's words (:mod:`.errors`). No FastAPI
here: the batch command runs it without HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Iterator

from ..api import SpeculativeLlama, collect_chat, collect_completion
from .errors import from_value_error
from .schemas import ChatCompletionRequest, CompletionRequest, parse
from .settings import RequestDefaults

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@dataclass(frozen=True)
class Route:
    """One of OpenAI's generation endpoints, as the API answers it.

    Attributes:
        request: the body's model (:mod:`.schemas`).
        method: the model's method the body's fields go to (``method(llm)``: the bound method).
        collect: builds the non-streamed response from the method's chunks.
        prompt_field: the request's name for the prompt, for error objects.
    """

    request: type
    method: Callable[[SpeculativeLlama], Callable[..., Iterator[dict]]]
    collect: Callable[[Iterator[dict]], dict]
    prompt_field: str


#: path -> how it is answered
ROUTES = {
    COMPLETIONS: Route(CompletionRequest, attrgetter("create_completion"), collect_completion, "prompt"),
    CHAT: Route(ChatCompletionRequest, attrgetter("create_chat_completion"), collect_chat, "messages"),
}


def open_stream(create: Callable[..., Iterator[dict]], req: Any, *, defaults: RequestDefaults, alias: str,
                prompt_field: str) -> Iterator[dict]:
    """The API's chunk stream for a parsed request (its values checked now).

    Args:
        create: the API call (``llm.create_chat_completion``, ...).
        req: the parsed body (a request model with ``api_kwargs``).
        defaults: the values of the sampling fields the body leaves out.
        alias: the model id the answers report.
        prompt_field: the request's name for the prompt ("prompt" or "messages").

    Raises:
        ApiError: a 400 naming the field at fault, in the request's words.
    """
    kwargs, renames = req.api_kwargs(defaults)
    try:
        return create(model=alias, **kwargs)
    except ValueError as e:  # the API's one validator said no
        raise from_value_error(e, prompt_field=prompt_field, renames=renames) from None


def answer(llm: SpeculativeLlama, route: Route, body: object, *, defaults: RequestDefaults, alias: str,
           on_chunk: Callable[[], None] = lambda: None) -> dict:
    """The non-streamed response the server would send for ``body``
    (a ``stream`` field is not read: the answer is always whole).

    Args:
        llm: the model pair.
        route: the endpoint (``ROUTES[path]``).
        body: the decoded JSON body.
        defaults, alias: as :func:`open_stream`.
        on_chunk: called before each chunk (one target pass) is taken; what
            it raises ends the generation and comes out of this call.

    Raises:
        ApiError: a 400 for what the request gets wrong.
    """
    req = parse(route.request, body)
    chunks = open_stream(route.method(llm), req, defaults=defaults, alias=alias,
                         prompt_field=route.prompt_field)
    try:
        return route.collect(_watched(chunks, on_chunk))
    except ValueError as e:
        raise from_value_error(e, prompt_field=route.prompt_field) from None
    finally:
        chunks.close()  # the instance's turn is free again, whatever happened


def _watched(chunks: Iterator[dict], on_chunk: Callable[[], None]) -> Iterator[dict]:
    while True:
        on_chunk()
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        yield chunk
