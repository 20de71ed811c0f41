"""``specllama serve``: flags in, a running server out.

Imports only click and light specllama modules at import time; FastAPI,
uvicorn and the models load inside the command, so ``specllama --help``
stays fast.
"""

from __future__ import annotations

import logging

import click

from ..cli_flags import boundary, chat_format_option, generation_flags, load_kwargs, model_options, n_predict_option
from ..model_refs import model_id
from .settings import (
    DEFAULT_HOST,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PARALLEL,
    DEFAULT_PORT,
    WEB_DIR,
    RequestDefaults,
    ServerSettings,
)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
API_KEY_ENV = "SPECLLAMA_API_KEY"


@click.command()
@model_options
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True, help="Port.")
@click.option("--api-key", envvar=API_KEY_ENV, default=None,
              help=f"Require 'Authorization: Bearer KEY' on the API (also ${API_KEY_ENV}).")
@click.option("--alias", default=None, help="The model id the server reports (default: the target's file name, "
              "or its ollama:/hf:/lmstudio: reference).")
@click.option("-np", "--parallel", "n_parallel", type=click.IntRange(1, 256), default=DEFAULT_PARALLEL,
              show_default=True, help="Requests that run at once, in parallel slots whose passes are decoded in "
              "shared batches (llama-server's -np); -c/--ctx-size is the cache they share.")
@click.option("--max-queue", type=click.IntRange(min=0), default=DEFAULT_MAX_QUEUE, show_default=True,
              help="Requests that may wait behind the running ones; more get 503 with Retry-After.")
@chat_format_option
@click.option("--cors-origin", "cors_origins", multiple=True,
              help="Allow cross-origin requests from this origin (repeatable; '*': any). None by default.")
@n_predict_option(-1, "max_tokens of a request that gives none (-1: until the model stops or the context is "
                      "full).")
@click.option("--no-webui", is_flag=True, help="Do not serve the web page at / (the API only).")
@click.option("--cache-reuse", type=click.IntRange(min=0), default=0, show_default=True,
              help="Reuse cached runs of at least this many tokens that a new prompt holds further on, shifting "
                   "them into place in both caches (llama-server's --cache-reuse; 0: only the shared prefix).")
@click.option("--draft-lookup", is_flag=True,
              help="Also draft by prompt lookup (what followed the text's last tokens where they stood before, in "
                   "the prompt or the output), in the passes where it promises more than the draft model; for code "
                   "completion, where the text to write often stands in the file already.")
@boundary
def serve(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, host, port, api_key, alias,
          n_parallel, max_queue,
          chat_format, cors_origins, n_predict, no_webui, cache_reuse, draft_lookup, **o) -> None:
    """Serve the pair over HTTP: OpenAI's /v1/completions and /v1/chat/completions,
    and a chat page at / that shows which tokens the draft proposed.

    Fields a request omits take the sampling flags here. One request runs at
    a time per slot (-np), in arrival order. Stop with Ctrl-C or SIGTERM.
    """
    if o["ignore_eos"]:
        raise click.ClickException("--ignore-eos is not supported by serve (a request ends at the model's end "
                                   "of generation)")
    if o["color"] != "auto":
        raise click.ClickException("--color is for generate and chat: serve prints no generated text")

    defaults = RequestDefaults.from_flags(o, n_predict)
    # the defaults must pass the rules requests are held to, before anything loads
    generation_flags(dict(o, **defaults.sampling()), convention="openai", max_tokens=n_predict)

    from ..api import SpeculativeLlama
    from ..demo import DEMO_CHAT
    from .app import create_app
    from .run import log_to_stderr, run
    from .worker import Worker

    log_to_stderr()
    log = logging.getLogger("specllama.server")
    if model is None and model_draft is None and pair is None:
        pair = DEMO_CHAT  # a server needs a chat template: the pair that can chat
    load = load_kwargs(o)
    worker = Worker(lambda: SpeculativeLlama(
        model, model_draft, pair=pair, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        n_ctx=ctx_size, draft_max=o["draft_max"], draft_min=o["draft_min"], seed=o["seed"], n_threads=threads,
        adaptive=not o["draft_fixed"], rule=o["rule"], chat_format=chat_format, convention="openai",
        last_n_tokens_size=o["repeat_last_n"], cache_reuse=cache_reuse, **load,
        draft_lookup=draft_lookup, n_parallel=n_parallel), max_queue=max_queue, slots=n_parallel)
    try:
        llm = worker.start()  # the worker thread opens the models: it is the one that runs them
        settings = ServerSettings(alias=alias or model_id(model, llm.model_path), api_key=api_key or None,
                                  max_queue=max_queue, cors_origins=tuple(cors_origins), defaults=defaults,
                                  static_dir=None if no_webui else WEB_DIR)
        app = create_app(worker, settings)
        engine = llm.engine
        draft = engine.draft.path if engine.draft is not None else ("prompt-lookup" if engine.drafter else "none")
        log.info(f"specllama serve: target {llm.model_path}, draft {draft} (--draft-max {o['draft_max']}, "
                 f"{'fixed' if o['draft_fixed'] else 'adaptive'}), context {engine.target.n_ctx}; "
                 f"{llm.chat_template().origin}; model id {settings.alias!r}")
        if settings.static_dir:
            log.info(f"the chat page: http://{'[' + host + ']' if ':' in host else host}:{port}/")
        if not settings.api_key and host not in LOOPBACK:
            log.warning(f"listening on {host} without --api-key: anyone who can reach it can use it")
        try:
            run(app, host=host, port=port, on_exit=worker.shutdown)
        except SystemExit as e:  # uvicorn's way to say it could not start (its log line says why)
            if e.code:
                raise click.ClickException(f"could not serve on {host}:{port} (see the error above)") from None
            raise
    finally:
        worker.stop()  # the worker frees the models, after at most one more target pass
    log.info("specllama serve: stopped, models freed")
