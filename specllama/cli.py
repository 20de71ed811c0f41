"""The ``specllama`` commands that load models: parse flags, print, and nothing else.

The group (:mod:`specllama.cli_group`) loads this module when one of them runs.
Flags follow llama.cpp's names. Library errors become one-line
``click.ClickException`` messages here, at the boundary.
"""

from __future__ import annotations

import json
import shlex
import sys

import click

from .backend import DEFAULT_N_GPU_LAYERS, DEFAULT_RPC_HOST, DEFAULT_RPC_PORT
from .cli_flags import (
    boundary,
    chat_format_option,
    filter_options,
    generation_flags,
    grammar_options,
    load_kwargs,
    load_options,
    model_options,
    n_predict_option,
)
from .cli_group import main  # noqa: F401 (specllama.cli:main, the entry point)
from .colors import color_enabled, legend, styled
from .demo import DEMO_CHAT
from .generation import stream_generate
from .opener import open_engine
from .options import DEFAULT_MAX_TOKENS, DEFAULT_RULE, RULES, sampling_params


@click.command()
@model_options
@grammar_options
@click.option("-p", "--prompt", required=True, help="The prompt text.")
@n_predict_option(DEFAULT_MAX_TOKENS, "Tokens to generate (-1: until the context is full).")
@click.option("--stop", "-r", "--reverse-prompt", "stop", multiple=True, help="Stop at this text (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming.")
@boundary
def generate(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, prompt, n_predict,
             stop, as_json, **o) -> None:
    """Generate text after a prompt; stats go to stderr."""
    generation_flags(o, max_tokens=n_predict, stop=stop)  # checked before any model loads
    color = not as_json and color_enabled(o["color"], sys.stdout)
    with open_engine(model, model_draft, pair=pair, use_draft=o["draft_max"] > 0, n_ctx=ctx_size,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads,
                     **load_kwargs(o)) as engine:
        options = generation_flags(o, n_vocab=engine.target.n_vocab, n_ctx=engine.target.n_ctx, max_tokens=n_predict,
                                   stop=stop, banned=engine.target.eog_tokens() if o["ignore_eos"] else ())
        if color:
            click.echo(legend(), err=True, color=True)
        pieces, tokens, origins, finish, stats = [], [], [], "interrupted", None
        try:
            for chunk in stream_generate(engine, prompt, options):
                pieces.append(chunk.text)
                tokens.extend(chunk.tokens)
                origins.extend(chunk.origins)
                stats = chunk.stats
                if chunk.finish_reason:
                    finish = chunk.finish_reason
                if not as_json and chunk.text:
                    click.echo(styled(chunk.pieces) if color else chunk.text, nl=False, color=color)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            pass  # Ctrl-C ends this generation; what came so far stands
        if as_json:
            out = {"text": "".join(pieces), "tokens": tokens, "origins": origins, "finish_reason": finish}
            out.update(stats.as_dict() if stats else {})
            if o["draft_max"] > 0:
                out["policy"] = engine.policy.describe(engine.draft_cap(o["draft_max"]))  # what k rested on
            click.echo(json.dumps(out))
        else:
            click.echo("")
            if stats is not None:
                click.secho(stats.summary(), err=True, dim=True)
        if finish == "interrupted":
            sys.exit(130)


@click.command()
@model_options
@grammar_options
@click.option("-sys", "--system-prompt", "system_prompt", default=None, help="System prompt.")
@chat_format_option
@n_predict_option(-1, "Most tokens per reply (-1: until the model stops or the context is full).")
@boundary
def chat(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, system_prompt, chat_format,
         n_predict, **o) -> None:
    """Chat with the model; the conversation stays in both KV caches."""
    from . import repl
    from .chat import ChatSession, template_for

    generation_flags(o, max_tokens=n_predict)  # checked before any model loads
    with open_engine(model, model_draft, pair=pair, use_draft=o["draft_max"] > 0, n_ctx=ctx_size,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads,
                     default_pair=DEMO_CHAT, **load_kwargs(o)) as engine:
        options = generation_flags(o, n_vocab=engine.target.n_vocab, n_ctx=engine.target.n_ctx, max_tokens=n_predict,
                                   banned=engine.target.eog_tokens() if o["ignore_eos"] else ())
        template = template_for(engine.target, chat_format)
        session = ChatSession(engine, template, system_prompt, options)
        source, cap = engine.draft.path if engine.draft else "prompt-lookup", engine.draft_cap(o["draft_max"])
        draft = "no draft" if engine.drafter is None else f"draft {source} (--draft-max {cap})"
        repl.run(session, banner=f"specllama chat: {engine.target.path}, {draft}; {template.origin}. "
                                 "/help for commands.", color=color_enabled(o["color"], sys.stdout))


def _number_list(kind: type, name: str, minimum: float):
    """A click callback parsing "1,2,4,8" into a list, with a one-line error."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None
        try:
            items = [kind(v) for v in value.split(",") if v.strip()]
        except ValueError:
            items = None
        if not items or any(v < minimum for v in items):
            raise click.BadParameter(
                f"{value!r} is not a comma-separated list of {name} >= {minimum:g} (e.g. {param.metavar})"
            )
        return list(dict.fromkeys(items))

    return parse


def _word_list(choices):
    """A click callback parsing "a,b" into a list of known words, with a one-line error."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if v not in choices]
        if not items or bad:
            raise click.BadParameter(f"{value!r}: expected a comma-separated list of {', '.join(choices)}")
        return list(dict.fromkeys(items))

    return parse


@click.command()
@load_options
@filter_options
@click.option("--draft-max", "--spec-draft-n-max", "draft_maxes", metavar="1,2,4,8", default=None,
              callback=_number_list(int, "draft lengths", 1),
              help="Fixed draft lengths to sweep (default 1,2,4,8; above 511, what a target batch holds beside its "
                   "first row: 511); the adaptive row is capped at the largest.")
@click.option("--temp", "temperatures", metavar="0,0.8", default=None,
              callback=_number_list(float, "temperatures", 0), help="Temperatures to sweep (default 0,0.8).")
@n_predict_option(None, "Tokens per run (default 48; --quick 32).", allow_all=False)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Passes over the prompts.")
@click.option("--prompts", "prompts_file", default=None, help="Prompts file: text lines, or JSONL with \"prompt\".")
@click.option("--only", "only", default=None, metavar="story,code,qa,summary",
              help="Run only these built-in prompts.")
@click.option("--quick", is_flag=True, help="A short run: k=4, two prompts, 32 tokens.")
@click.option("--scenario", default=None, help="A built-in pair instead of -m/-md: demo; self-draft "
              "(the Q4_K_M file as target and draft, where speculation cannot pay); prompt-lookup "
              "(the F32 target with n-gram drafts).")
@click.option("--rule", "rules", metavar="token,block", default=None, callback=_word_list(RULES),
              help=f"Acceptance rules to measure, each with fixed and adaptive rows (default {DEFAULT_RULE}).")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Also time llama-cpp-python's plain Llama.create_completion on the target.")
@click.option("--json", "as_json", is_flag=True, help='Print {"rows": [...]} instead of the table.')
@click.option("--plot", "plot_path", default=None, help="Also draw speedup and acceptance into this PNG file.")
@boundary
def bench(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, top_k, top_p, min_p, seed,
          draft_maxes, temperatures, n_predict, repeat, prompts_file, only, quick, scenario, rules, baseline, as_json,
          plot_path, **o) -> None:
    """Measure speculative against target-only decoding on this machine."""
    from . import bench as b

    if scenario is not None:
        model, model_draft = b.scenario_paths(scenario)
    if plot_path:
        from .bench_plot import check_plot_path

        check_plot_path(plot_path)
    prompts = b.load_prompts(prompts_file) if prompts_file else b.builtin_prompts(
        only.split(",") if only else b.QUICK_PROMPTS if quick else None)
    draft_maxes = draft_maxes or list(b.QUICK_DRAFT_MAXES if quick else b.DEFAULT_DRAFT_MAXES)
    temperatures = temperatures or list(b.DEFAULT_TEMPERATURES)
    n_tokens = n_predict or (b.QUICK_TOKENS if quick else b.DEFAULT_BENCH_TOKENS)
    base = sampling_params(temperature=0.0, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    with open_engine(model, model_draft, pair=pair, n_ctx=ctx_size, n_gpu_layers=n_gpu_layers,
                     n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads, **load_kwargs(o)) as engine:
        rules, draft_maxes = rules or [DEFAULT_RULE], b.draft_lengths(engine, draft_maxes)
        total = b.n_runs(len(prompts), temperatures, draft_maxes, repeat, len(rules), baseline)
        with click.progressbar(length=total, label="bench", file=sys.stderr, hidden=not sys.stderr.isatty()) as bar:
            result = b.run_bench(engine, prompts, temperatures=temperatures, draft_maxes=draft_maxes,
                                 n_tokens=n_tokens, repeat=repeat, seed=max(seed, 0), base_params=base,
                                 on_run=lambda: bar.update(1), rules=rules, llama_cpp=baseline)
    if plot_path:
        from .bench_plot import save_plot

        save_plot(result, plot_path)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    click.echo(b.format_table(result))
    click.echo(f"peak RSS {result.peak_rss_mb:.0f} MB; {n_tokens} tokens x {len(prompts)} prompts x {repeat}")
    click.echo(result.adaptive_summary())
    click.echo(result.recommendation())


@click.command()
@click.argument("name")
@boundary
def pull(name) -> None:
    """Download both files of a curated pair into the Hugging Face cache."""
    from .pairs import pull as pull_pair

    target, draft = pull_pair(name, on_file=lambda f: click.echo(f"{f.role}: {f.repo}/{f.filename} ({f.size})",
                                                                  err=True))
    click.echo(f"target: {target}\ndraft:  {draft}")
    click.echo(f"use: specllama generate --pair {name} -p \"...\"")


@click.command()
@click.argument("target")
@click.option("--dir", "dirs", multiple=True, type=click.Path(), metavar="FOLDER",
              help="Also look for drafts in this folder, recursively (repeatable).")
@click.option("--save", "save_as", default=None, metavar="NAME",
              help="Save the best draft with TARGET as the pair NAME (then --pair NAME in every command).")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=click.IntRange(min=-1), default=DEFAULT_N_GPU_LAYERS,
              show_default=True, help="Target layers to offload to the GPU (-1: all).")
@click.option("-ngld", "--n-gpu-layers-draft", "n_gpu_layers_draft", type=click.IntRange(min=-1), default=None,
              help="Draft layers to offload (default: as -ngl).")
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads.")
@boundary
def pair(target, dirs, save_as, n_gpu_layers, n_gpu_layers_draft, threads) -> None:
    """Measure the local models that can draft for TARGET, and say which pays best here."""
    from tqdm import tqdm

    from . import pair_measure, pairing
    from .model_refs import resolve
    from .saved_pairs import check_name

    if save_as is not None:
        check_name(save_as)  # before anything is measured
    path = resolve(target, "target")
    model, drafts, refused = pairing.drafts_for(path, dirs)
    with tqdm(total=pair_measure.n_runs(len(drafts)), desc="pair", unit="run", file=sys.stderr,
              disable=not sys.stderr.isatty()) as bar:  # (none where stderr is a file or a pipe, as batch's)
        measured = pair_measure.measure_drafts(path, drafts, n_threads=threads, n_gpu_layers=n_gpu_layers,
                                          n_gpu_layers_draft=n_gpu_layers_draft, on_run=lambda: bar.update(1))
    click.echo(pair_measure.format_pairing(model, measured, refused))
    best = pair_measure.winner(measured)
    click.echo(f"best draft: {best.candidate.model.ref} ({pair_measure.verdict_word(best)})")
    if save_as is not None:
        saved = pair_measure.save_winner(save_as, pairing.target_ref(target), measured)
        click.echo(f"saved as {save_as!r} in {saved}: use --pair {shlex.quote(save_as)}")


@click.command("rpc-server")
@click.option("-H", "--host", default=DEFAULT_RPC_HOST, show_default=True,
              help="IPv4 address to listen on. Anything but 127.0.0.1 lets other machines in: never on an open "
                   "network (the server is not secure).")
@click.option("-p", "--port", type=click.IntRange(1, 65535), default=DEFAULT_RPC_PORT, show_default=True,
              help="Port.")
@click.option("-c", "--cache", is_flag=True,
              help="Keep the tensors clients send in a local cache ($LLAMA_CACHE/rpc, else ~/.cache/llama.cpp/rpc), "
                   "so a model loads faster the next time.")
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: all cores).")
@click.option("-d", "--device", "devices", default=None, metavar="DEV1,DEV2",
              help="Devices to serve (e.g. CUDA0; default: every GPU, else the CPU).")
@boundary
def rpc_server(host, port, cache, threads, devices) -> None:
    """Serve this machine's devices to llama.cpp RPC clients (--rpc HOST:PORT elsewhere).

    llama.cpp's ggml RPC server, in this process: a remote host needs only
    the same llama-cpp-python build (with RPC). Stop with Ctrl-C or SIGTERM.
    """
    from .rpc_server import run

    run(host=host, port=port, n_threads=threads, cache=cache,
        devices=[d for d in (devices or "").split(",") if d.strip()], echo=click.echo)

