"""Plain ASGI middlewares: the request log, the body size limit, the API key.

Pure ASGI (not Starlette's ``BaseHTTPMiddleware``) so that ``receive`` stays
the server's own: a waiting request can still hear its client disconnect.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any, Awaitable, Callable

from starlette.responses import JSONResponse

from .errors import ApiError

log = logging.getLogger("specllama.server")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

QUIET_PATHS = ("/health", "/metrics")  # polled: logged only when they fail
JOB_KEY, NOTE_KEY = "specllama_job", "specllama_note"  # set in scope["state"] by the handlers
LOG_WAIT_SECONDS = 30.0  # how long a request's log line waits for its cancelled generation to stop


async def _send_error(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse(error.body(), status_code=error.status, headers=error.headers)(scope, receive, send)


class AccessLog:
    """One line per request on stderr, after its response: method, path,
    status and, for a generation, its tokens, tokens/s and acceptance (the
    statistics record's summary)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500  # unless a response starts

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if not (scope["path"] in QUIET_PATHS and status < 400):
                await self._log(scope, status, time.perf_counter() - start)

    @staticmethod
    async def _log(scope: Scope, status: int, seconds: float) -> None:
        state = scope.get("state") or {}
        line = f"{scope['method']} {scope['path']} {status}"
        job = state.get(JOB_KEY)
        if job is not None:
            try:  # a cancelled generation stops after its current target pass
                await asyncio.wait_for(job.ended.wait(), LOG_WAIT_SECONDS)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            line += f" {job.outcome or 'unfinished'}"
            if job.stats is not None:
                s = job.stats
                line += f": {s.n_prompt_tokens} prompt tokens ({s.n_prompt_evaluated} evaluated), {s.summary()}"
        elif state.get(NOTE_KEY):
            line += f": {state[NOTE_KEY]}"
        log.info(f"{line}; {seconds:.2f} s")


class BodyLimit:
    """413 for a request body larger than ``max_bytes``: at once when its
    Content-Length says so, else as soon as that many bytes arrived."""

    def __init__(self, app: App, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self) -> ApiError:
        return ApiError(413, f"the request body is larger than the limit of {self.max_bytes} bytes",
                        code="request_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _send_error(self._too_large(), scope, receive, send)
        received = 0

        async def limited() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited, send)


class ApiKeyAuth:
    """401 on the protected paths without ``Authorization: Bearer KEY``;
    the key is compared in constant time. Other paths (``/health``, the web
    page) and CORS preflights stay open."""

    def __init__(self, app: App, api_key: str, protected_prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.key = api_key.encode("utf-8")
        self.prefixes = protected_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or not scope["path"].startswith(self.prefixes):
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key):
            return await self.app(scope, receive, send)
        message = ("the API key is not valid" if header else
                   "an API key is needed: send the header 'Authorization: Bearer KEY'")
        scope.setdefault("state", {})[NOTE_KEY] = message
        await _send_error(ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}),
                          scope, receive, send)
