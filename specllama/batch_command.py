"""The ``specllama batch`` command: parses flags, names each failed line on
stderr, shows the progress bar and the summary.

The work is :mod:`specllama.batch_run`; it loads inside the command, so
``specllama --help`` stays fast.
"""

from __future__ import annotations

import sys

import click

from .cli_flags import boundary, chat_format_option, generation_flags, load_kwargs, model_options, n_predict_option
from .server.settings import RequestDefaults


@click.command()
@click.argument("requests_file", metavar="REQUESTS.jsonl", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The answers (JSONL, OpenAI's batch output). An existing file is resumed: the custom_ids it "
                   "holds are skipped.")
@click.option("-np", "--parallel", "n_parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Requests run at once, their passes batched (SpeculativeLlama's n_parallel).")
@click.option("--alias", default=None, help="The model id the answers report (default: the target's file name, "
              "or its ollama:/hf:/lmstudio: reference).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar (there is none when stderr is not a terminal).")
@model_options
@chat_format_option
@n_predict_option(-1, "max_tokens of a request that gives none (-1: until the model stops or the context is "
                      "full).")
@boundary
def batch(requests_file, output, n_parallel, alias, quiet, model, model_draft, pair, ctx_size, n_gpu_layers,
          n_gpu_layers_draft, threads, chat_format, n_predict, **o) -> None:
    """Answer a file of OpenAI Batch API requests offline.

    REQUESTS.jsonl has one request a line: {"custom_id", "method": "POST",
    "url": "/v1/chat/completions" or "/v1/completions", "body"}, the body
    as for `specllama serve`. Each answer is written to -o as it finishes.
    A bad line is named by its number on stderr and the others still run;
    the exit status is 1 if any line failed, 130 if interrupted.
    """
    if o["ignore_eos"]:
        raise click.ClickException("--ignore-eos is not supported by batch (a request ends at the model's end "
                                   "of generation)")
    if o["color"] != "auto":
        raise click.ClickException("--color is for generate and chat: batch prints no generated text")
    defaults = RequestDefaults.from_flags(o, n_predict)
    # the defaults must pass the rules requests are held to, before anything loads
    generation_flags(dict(o, **defaults.sampling()), convention="openai", max_tokens=n_predict)

    from tqdm import tqdm

    from .batch_run import Batch, open_llama
    from .demo import DEMO_CHAT
    from .model_refs import model_id

    batch = Batch(requests_file, output)
    for bad in batch.bad_lines:
        click.echo(f"{batch.where(bad.line)}: {bad.message}", err=True)
    if batch.skipped:
        click.echo(f"skipping {batch.skipped} request{'s' * (batch.skipped != 1)} already in {output}", err=True)
    if model is None and model_draft is None and pair is None:
        pair = DEMO_CHAT  # chat requests need a chat template: the pair that can chat
    llama_kwargs = dict(
        target=model, draft=model_draft, pair=pair, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        n_ctx=ctx_size, draft_max=o["draft_max"], draft_min=o["draft_min"], seed=o["seed"], n_threads=threads,
        adaptive=not o["draft_fixed"], rule=o["rule"], chat_format=chat_format,
        last_n_tokens_size=o["repeat_last_n"], **load_kwargs(o))
    interrupted = False
    with tqdm(total=len(batch.requests), desc="batch", unit="req", file=sys.stderr,
              disable=quiet or not sys.stderr.isatty()) as bar:
        try:
            for outcome in batch.run(lambda: open_llama(llama_kwargs, n_parallel), defaults=defaults,
                                     alias=lambda llm: alias or model_id(model, llm.model_path),
                                     n_parallel=n_parallel):
                bar.update(1)
                if not outcome.ok:
                    bar.write(f"{batch.where(outcome.request.line)}: {outcome.message}", file=sys.stderr)
        except KeyboardInterrupt:
            interrupted = True  # what finished is written; a rerun goes on from there
    click.echo(batch.summary(), err=True)
    sys.exit(130 if interrupted else 1 if batch.failed else 0)
