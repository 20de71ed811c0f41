"""A generation request between the event loop and the worker thread, and
the two ways it is answered: one JSON response, or server-sent events.

The chunks are the API's own dicts; a non-streamed response is built from
them by the API's own collector, so HTTP and Python answers cannot drift.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Callable, Iterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..stats import GenerationStats
from .errors import PROMPT, ApiError, from_value_error, internal_error, shutting_down
from .worker import CANCELLED, ERROR, OK, SHUTDOWN, SUPERSEDED, Worker

CLIENT_GONE = 499  # nginx's "client closed request": only the log sees it


class AsyncJob:
    """One request's generation, as the worker sees it (``chunks``,
    ``cancelled``, ``deliver``, ``finish``) and as the event loop awaits it.

    Args:
        chunks: the API's chunk iterator (``create_*(stream=True)``).
        endpoint: the path, for metrics and the log.
        arrived: when the request arrived (``time.perf_counter()``; default: now).
    """

    def __init__(self, chunks: Iterator[dict], *, endpoint: str, arrived: float | None = None,
                 client: str | None = None, warm_up: bool = False, superseded_body: dict | None = None) -> None:
        self.chunks = chunks
        self.endpoint = endpoint
        self.cancelled = False
        # an editor's warm-up, and the client whose newer request supersedes it (see Worker.submit)
        self.client, self.warm_up, self.superseded = client, warm_up, False
        self.superseded_body = superseded_body  # its answer then
        self.arrived = time.perf_counter() if arrived is None else arrived
        self.outcome: str | None = None
        self.stats: GenerationStats | None = None
        self.error: BaseException | None = None
        self.ended = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[dict | None] = asyncio.Queue()

    # -- called by the worker (any thread) -----------------------------------

    def deliver(self, chunk: dict) -> None:
        self._call(self._events.put_nowait, chunk)

    def finish(self, outcome: str, stats: GenerationStats | None, error: BaseException | None) -> None:
        self.outcome, self.stats, self.error = outcome, stats, error
        self._call(self._end)

    def _end(self) -> None:
        self._events.put_nowait(None)
        self.ended.set()

    def _call(self, f: Callable, *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(f, *args)
        except RuntimeError:
            pass  # the event loop is closed: nobody is listening any more

    # -- awaited by the event loop -------------------------------------------

    async def next_chunk(self) -> dict | None:
        """The next chunk, or None once the job ended."""
        return await self._events.get()

    async def all_chunks(self) -> list[dict]:
        chunks = []
        while (chunk := await self.next_chunk()) is not None:
            chunks.append(chunk)
        return chunks

    def failure(self) -> ApiError:
        """The error a job that did not end "ok" is answered with."""
        if self.outcome == SHUTDOWN:
            return shutting_down()
        if self.outcome == ERROR and isinstance(self.error, ValueError):
            return from_value_error(self.error, prompt_field=PROMPT)
        return internal_error()


async def respond(job: AsyncJob, worker: Worker, request: Request,
                  collect: Callable[[Iterator[dict]], dict]) -> Response:
    """The non-streamed response: the API's collector over the job's chunks.
    If the client disconnects first, its job is cancelled (waiting or running)."""
    chunks = asyncio.ensure_future(job.all_chunks())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({chunks, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        client_gone = not chunks.done()
        if client_gone:
            worker.cancel(job)
            chunks.cancel()
    if client_gone:
        return Response(status_code=CLIENT_GONE)
    if job.outcome == SUPERSEDED:
        return JSONResponse(job.superseded_body or {})
    if job.outcome != OK:
        raise job.failure()
    return JSONResponse(collect(iter(chunks.result())))


async def _disconnected(request: Request) -> None:
    """Returns when the client goes (the body was read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def events(job: AsyncJob, worker: Worker, *, include_usage: bool, done: bool = True) -> AsyncIterator[str]:
    """The ``data:`` payloads of a streamed response: the API's chunks, then
    (``include_usage``) a chunk with empty ``choices`` and ``usage``, then
    ``[DONE]`` (not for llama-server's own endpoints: ``done`` False);
    ``usage`` is only there, as OpenAI sends it (a client adding up the
    usage of chunks counts it once). A job that fails ends with an
    error object; a client that disconnects (sse-starlette cancels this
    generator) cancels the job."""
    last, usage = None, None
    try:
        while (chunk := await job.next_chunk()) is not None:
            usage = chunk.pop("usage", usage)  # the API's last chunk has it (timings=True)
            if done:  # (the stop string that ended it: for llama-server's own endpoints, not OpenAI's chunks)
                chunk.pop("stopping_word", None)
            last = chunk
            yield _json(chunk, compact=not done)
        if job.outcome == OK:
            if include_usage and last is not None and usage is not None:
                yield _json({"id": last["id"], "object": last["object"], "created": last["created"],
                             "model": last["model"], "choices": [], "usage": usage})
        elif job.outcome in (CANCELLED, SUPERSEDED):
            return
        else:
            yield _json(job.failure().body())
        if done:
            yield "[DONE]"
    finally:
        if job.outcome is None:
            worker.cancel(job)


def _json(obj: object, compact: bool = False) -> str:
    """``compact``: no spaces (llama-server's own endpoints, as their non-streamed answers)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":") if compact else None)
