"""The FastAPI app: OpenAI's completion and chat endpoints, llama-server's
extras (``/health``, ``/metrics``, ``/tokenize``, ``/detokenize``,
``timings``, per-request ``speculative.n_max``), over one model pair.

Handlers only parse and format. A request body becomes a
``SpeculativeLlama.create_*`` call (:mod:`.calls`, shared with ``specllama
batch``); the call checks every value (``convention="openai"``) and returns
the API's chunk stream, which the worker runs when its turn comes (:mod:`.worker`);
answers are the API's own dicts (:mod:`.jobs`). Errors are OpenAI error
objects (:mod:`.errors`), never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles

from ..api import SpeculativeLlama
from ..options import check_prompt_tokens
from .calls import CHAT, COMPLETIONS, ROUTES, open_stream
from .errors import ApiError, internal_error, not_utf8, shutting_down
from .jobs import AsyncJob, events, respond
from .metrics import Metrics
from .middleware import JOB_KEY, NOTE_KEY, AccessLog, ApiKeyAuth, BodyLimit
from .native import (
    COMPLETION,
    INFILL,
    InfillRequest,
    NativeCompletionRequest,
    collect_native,
    create_native,
    warm_up_fields,
)
from .schemas import DetokenizeRequest, TokenizeRequest, parse
from .settings import PROTECTED_PREFIXES, RETRY_AFTER_SECONDS, SHUTDOWN_GRACE_SECONDS, ServerSettings
from .worker import OK, SHUTDOWN, QueueFull, ShuttingDown, Worker

WEB_PREFIX = "/web"  # the page's CSS, JavaScript and icon (the page itself is /)
SSE_SEPARATOR = "\n"  # "data: {...}\n\n", as OpenAI sends them


def create_app(worker: Worker, settings: ServerSettings) -> FastAPI:
    """The app serving the model of ``worker``, which runs its generations.

    The worker is started here unless it was already (it opens the model);
    the app's lifespan stops it (the model is freed), and
    :meth:`Worker.shutdown` ends the requests in flight (SIGINT/SIGTERM).
    """
    llm: SpeculativeLlama = worker.start()
    slots = llm.slots
    metrics = Metrics(queue_length=lambda: worker.queue_length, running=lambda: worker.running, slots=worker.slots,
                      batches=(lambda: (slots.n_target_passes, slots.n_target_rows)) if slots is not None else None)

    def record(job: AsyncJob, outcome: str, stats) -> None:  # in the worker thread, before the job hears
        metrics.record(job.endpoint, outcome, stats, time.perf_counter() - job.arrived if outcome == OK else None)

    worker.on_finish = record
    # one thread turns bodies into API streams (tokenizing can take a while): in arrival order, off the event loop
    intake = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specllama-intake")
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)  # at most one more target pass
            intake.shutdown(wait=False)

    middleware = [Middleware(AccessLog)]
    if settings.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type"], max_age=600))
    middleware.append(Middleware(BodyLimit, max_bytes=settings.max_body_bytes))
    if settings.api_key:
        middleware.append(Middleware(ApiKeyAuth, api_key=settings.api_key, protected_prefixes=PROTECTED_PREFIXES))
    app = FastAPI(title="specllama", lifespan=lifespan, middleware=middleware, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.worker = worker
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        error = ApiError(e.status_code, f"{e.detail}: {request.method} {request.url.path}", code=code)
        return JSONResponse(error.body(), status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> JSONResponse:
        # the traceback is logged by the server (Starlette re-raises after this answer)
        return JSONResponse(internal_error().body(), status_code=500)

    async def generation(request: Request, model: type, create: Callable, collect: Callable, endpoint: str,
                         prompt_field: str, *, native: bool = False):
        """``native``: llama-server's own endpoints (``create`` and ``collect``
        are then made per request, and a stream ends without ``[DONE]``)."""
        arrived = time.perf_counter()
        try:
            req = parse(model, await _json_body(request))
            if native:
                create, collect = partial(create_native, llm, req), collect_native(req)
            chunks = await asyncio.get_running_loop().run_in_executor(intake, partial(
                open_stream, create, req, defaults=settings.defaults, alias=settings.alias, prompt_field=prompt_field))
            job = AsyncJob(chunks, endpoint=endpoint, arrived=arrived, **(
                warm_up_fields(req, request.client.host if request.client else None) if native else {}))
            try:
                worker.submit(job)
            except QueueFull:
                chunks.close()
                raise ApiError(503, f"the server is busy: {worker.max_queue} requests are already waiting "
                                    f"(--max-queue); retry later", type="server_error", code="queue_full",
                               headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
            except ShuttingDown:
                chunks.close()
                raise shutting_down() from None
        except ApiError as e:
            outcome = {"queue_full": "rejected", "shutting_down": SHUTDOWN}.get(e.code or "", "invalid")
            metrics.record(endpoint, outcome)
            setattr(request.state, NOTE_KEY, f"{e.code}: {e.message}")
            raise
        except Exception:
            metrics.record(endpoint, "error")
            raise
        setattr(request.state, JOB_KEY, job)
        if req.stream:
            return EventSourceResponse(events(job, worker, include_usage=req.include_usage, done=not native),
                                       sep=SSE_SEPARATOR, shutdown_grace_period=SHUTDOWN_GRACE_SECONDS)
        return await respond(job, worker, request, collect)

    async def openai(request: Request, path: str):
        route = ROUTES[path]
        return await generation(request, route.request, route.method(llm), route.collect, path,
                                route.prompt_field)

    @app.post(COMPLETIONS)
    async def completions(request: Request):
        return await openai(request, COMPLETIONS)

    @app.post(CHAT)
    async def chat_completions(request: Request):
        return await openai(request, CHAT)

    @app.post(INFILL)
    async def infill(request: Request):
        return await generation(request, InfillRequest, create_native, collect_native, INFILL, "input_prefix",
                                native=True)

    @app.post(COMPLETION)
    async def completion(request: Request):
        return await generation(request, NativeCompletionRequest, create_native, collect_native, COMPLETION,
                                "prompt", native=True)

    @app.get("/v1/models")
    async def models() -> dict:
        engine = llm.engine
        draft = engine.draft.path if engine.draft is not None else ("prompt-lookup" if engine.drafter else None)
        return {"object": "list", "data": [{
            "id": settings.alias, "object": "model", "created": started, "owned_by": "specllama",
            "meta": {"target": llm.model_path, "draft": draft, "n_ctx": engine.target.n_ctx,
                     "n_vocab": engine.target.n_vocab, "draft_max": engine.draft_cap(llm.draft_max),
                     "adaptive": llm.adaptive}}]}

    @app.get("/health")
    async def health() -> JSONResponse:
        if not worker.accepting:
            return JSONResponse(shutting_down().body(), status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/slots")
    async def slot_states() -> list[dict]:
        """llama-server's ``GET /slots``: each slot, busy or idle."""
        if slots is not None:
            return slots.describe()
        return [{"id": 0, "id_task": -1, "n_ctx": llm.engine.target.n_ctx, "is_processing": worker.running > 0,
                 "n_cached": len(llm.engine.target.tokens), "speculative": llm.engine.drafter is not None}]

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        req = parse(TokenizeRequest, await _json_body(request))
        try:
            tokens = await asyncio.to_thread(llm.tokenize, req.content, add_bos=req.add_special,
                                             special=req.parse_special)
        except UnicodeError as e:
            raise not_utf8("content", e) from None
        if not req.with_pieces:
            return {"tokens": tokens}
        return {"tokens": [{"id": t, "piece": _piece(llm.detokenize([t]))} for t in tokens]}

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict:
        req = parse(DetokenizeRequest, await _json_body(request))
        try:
            tokens = check_prompt_tokens(req.tokens, llm.engine.target.n_vocab)
        except ValueError as e:
            raise ApiError(400, str(e), param="tokens", code="invalid_value") from None
        text = await asyncio.to_thread(llm.detokenize, tokens)
        return {"content": text.decode("utf-8", errors="replace")}

    if settings.static_dir:  # the web page, when there is one: open (no key), its files under /web/
        index = os.path.join(settings.static_dir, "index.html")

        @app.get("/", include_in_schema=False)
        async def page() -> FileResponse:
            return FileResponse(index)

        app.mount(WEB_PREFIX, StaticFiles(directory=settings.static_dir), name="web")
    return app


async def _json_body(request: Request) -> object:
    body = await request.body()
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON ({e})", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "the request body is not valid JSON (nested too deeply)", code="invalid_json") from None


def _piece(piece: bytes) -> str | list[int]:
    """A token's text, or its bytes where they are not UTF-8 on their own (as llama-server)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)
