"""The ``specllama verify`` command: parses flags, prints the report.

``cli.py`` imports :data:`verify` at its very end, and this module reuses
cli's flag decorators; so the command is built on first access (a module
``__getattr__``), when those decorators exist whichever of the two modules
was imported first. The check itself is :mod:`specllama.selfcheck`.
"""

from __future__ import annotations

import json
import sys

import click


def _build() -> click.Command:
    from .cli import boundary, filter_options, load_options, penalty_options, rpc_kwargs
    from .options import DEFAULT_RULE, RULES
    from .sampling import DEFAULT_TEMPERATURE
    from .selfcheck import DEFAULT_DRAFT_MAX, DEFAULT_PROMPT, DEFAULT_SAMPLES

    @click.command()
    @load_options
    @filter_options
    @penalty_options
    @click.option("--temp", "temperature", type=click.FloatRange(min=0), default=DEFAULT_TEMPERATURE,
                  show_default=True, help="Temperature (0: check that every sample is the target's argmax).")
    @click.option("--draft-max", "--spec-draft-n-max", "draft_max", type=click.IntRange(min=0),
                  default=DEFAULT_DRAFT_MAX, show_default=True,
                  help="Tokens drafted on every pass, fixed (0: target-only decoding, a control).")
    @click.option("--rule", type=click.Choice(RULES), default=DEFAULT_RULE, show_default=True,
                  help="Acceptance rule: token-wise or block verification.")
    @click.option("-p", "--prompt", default=DEFAULT_PROMPT, show_default=True,
                  help="The prompt whose next two tokens are sampled.")
    @click.option("-N", "--samples", type=click.IntRange(min=1), default=DEFAULT_SAMPLES, show_default=True,
                  help="Speculative runs (each gives a first token; a second after the most likely first one).")
    @click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
    @boundary
    def verify(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, prompt, samples,
               draft_max, rule, as_json, **o) -> None:
        """Check statistically that speculative decoding samples the target's distribution.

        N first tokens (and second tokens after the most likely first one)
        are drawn by speculative decoding and tested by chi-square against
        the target's own one-row decode, at alpha 0.001 per check. Exit
        status 1 on FAIL. The report is made to be pasted into a bug report.
        """
        from .backend import default_threads
        from .opener import open_engine
        from .options import generation_kwargs
        from .selfcheck import format_report, run_verify

        rpc = rpc_kwargs(o)
        # the sampling and penalty flags are checked before any model loads
        kwargs = generation_kwargs(policy="cli", n_vocab=1 << 30, draft_max=draft_max, adaptive=False, rule=rule,
                                   **o)
        with open_engine(model, model_draft, pair=pair, use_draft=draft_max > 0, n_ctx=ctx_size,
                         n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
                         n_threads=threads, **rpc) as engine:
            kwargs = generation_kwargs(policy="cli", n_vocab=engine.target.n_vocab, n_ctx=engine.target.n_ctx,
                                       draft_max=draft_max, adaptive=False, rule=rule, **o)
            settings = {"ctx_size": ctx_size, "n_gpu_layers": n_gpu_layers, "n_gpu_layers_draft": n_gpu_layers_draft,
                        "threads": threads or default_threads()}
            for key, value in (("rpc", ",".join(rpc["rpc_servers"])), ("rpc_draft", ",".join(rpc["rpc_servers_draft"])),
                               ("tensor_split", ",".join(f"{v:g}" for v in rpc["tensor_split"] or ()))):
                if value:
                    settings[key] = value  # recorded only when given: local reports stay as they were
            settings.update({k: o[k] for k in ("repeat_penalty", "repeat_last_n", "presence_penalty",
                                               "frequency_penalty")})
            # the bar shows from the first sample on: an error found before sampling is alone on stderr
            bar = click.progressbar(length=samples, label="verify", file=sys.stderr)
            try:
                result = run_verify(engine, params=kwargs["params"], processor=kwargs["processor"], prompt=prompt,
                                    n_samples=samples, draft_max=draft_max, rule=rule, settings=settings,
                                    on_sample=lambda: bar.update(1))
            finally:
                if bar.pos:
                    bar.render_finish()
        click.echo(json.dumps(result.as_dict()) if as_json else format_report(result))
        if not result.passed:
            sys.exit(1)

    return verify


def __getattr__(name: str) -> click.Command:
    if name != "verify":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import cli  # noqa: F401  (imported on its own, this loads cli, which comes back here for `verify`)

    if "verify" not in globals():
        globals()["verify"] = _build()
    return globals()["verify"]
