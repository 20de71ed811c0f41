"""The ``specllama verify`` command: parses flags, prints the report.

The check itself is :mod:`specllama.selfcheck`.
"""

from __future__ import annotations

import json
import sys

import click

from .cli_flags import (
    boundary,
    draft_max_option,
    filter_options,
    generation_flags,
    grammar_options,
    load_kwargs,
    load_options,
    penalty_options,
    rule_option,
    temp_option,
)
from .sampling import DEFAULT_TEMPERATURE
from .selfcheck import DEFAULT_PROMPT, DEFAULT_SAMPLES, VERIFY_DRAFT_MAX


@click.command()
@load_options
@filter_options
@penalty_options
@temp_option("Temperature (0: check that every sample is the target's argmax).", DEFAULT_TEMPERATURE)
@draft_max_option(VERIFY_DRAFT_MAX, "Tokens drafted on every pass, fixed (0: target-only decoding, a control).")
@rule_option
@grammar_options
@click.option("-p", "--prompt", default=DEFAULT_PROMPT, show_default=True,
              help="The prompt whose next two tokens are sampled.")
@click.option("-N", "--samples", type=click.IntRange(min=1), default=DEFAULT_SAMPLES, show_default=True,
              help="Speculative runs (each gives a first token; a second after the most likely first one).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@boundary
def verify(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, prompt, samples, as_json,
           **o) -> None:
    """Check statistically that speculative decoding samples the target's distribution.

    N first tokens (and second tokens after the most likely first one)
    are drawn by speculative decoding and tested by chi-square against
    the target's own one-row decode, at alpha 0.001 per check. Exit
    status 1 on FAIL. The report is made to be pasted into a bug report.
    """
    from .backend import default_threads
    from .opener import open_engine
    from .selfcheck import format_report, run_verify

    load = load_kwargs(o)
    draft_max, rule = o["draft_max"], o["rule"]
    generation_flags(o, adaptive=False)  # the sampling and penalty flags are checked before any model loads
    with open_engine(model, model_draft, pair=pair, use_draft=draft_max > 0, n_ctx=ctx_size,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
                     n_threads=threads, **load) as engine:
        options = generation_flags(o, n_vocab=engine.target.n_vocab, n_ctx=engine.target.n_ctx, adaptive=False)
        settings = {"ctx_size": ctx_size, "n_gpu_layers": n_gpu_layers, "n_gpu_layers_draft": n_gpu_layers_draft,
                    "threads": threads or default_threads()}
        for key, value in (("rpc", ",".join(load["rpc_servers"])), ("rpc_draft", ",".join(load["rpc_servers_draft"])),
                           ("tensor_split", ",".join(f"{v:g}" for v in load["tensor_split"] or ())),
                           ("flash_attn", "on" if load["flash_attn"] else "")):
            if value:
                settings[key] = value  # recorded only when given: local reports stay as they were
        settings.update({k: o[k] for k in ("repeat_penalty", "repeat_last_n", "presence_penalty",
                                           "frequency_penalty")})
        # the bar shows from the first sample on: an error found before sampling is alone on stderr
        bar = click.progressbar(length=samples, label="verify", file=sys.stderr, hidden=not sys.stderr.isatty())
        try:
            result = run_verify(engine, params=options.params, processor=options.processor, prompt=prompt,
                                n_samples=samples, draft_max=draft_max, rule=rule, settings=settings,
                                on_sample=lambda: bar.update(1), grammar=options.grammar)
        finally:
            if bar.pos:
                bar.render_finish()
    click.echo(json.dumps(result.as_dict()) if as_json else format_report(result))
    if not result.passed:
        sys.exit(1)
