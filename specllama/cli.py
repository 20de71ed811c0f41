"""The ``specllama`` command: parses flags, prints, and nothing else.

Flags follow llama.cpp's names. Library errors become one-line
``click.ClickException`` messages here, at the boundary.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import warnings

import click

from .backend import DEFAULT_N_CTX, DEFAULT_N_GPU_LAYERS, DEFAULT_RPC_HOST, DEFAULT_RPC_PORT
from .colors import COLOR_MODES, color_enabled, legend, styled
from .demo import DEMO_CHAT
from .errors import SpecLlamaError, SpecLlamaWarning
from .generate import DEFAULT_DRAFT_MAX, DEFAULT_MAX_TOKENS, stream_generate
from .opener import open_engine
from .options import (DEFAULT_RULE, RULES, check_draft, check_rpc_servers, check_tensor_split, generation_kwargs,
                      sampling_params)
from .processors import DEFAULT_PENALTY_LAST_N
from .sampling import DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P


def _n_predict(ctx: click.Context, param: click.Parameter, value: int) -> int | None:
    if value == 0:
        raise click.BadParameter("0 generates nothing; use -1 (until the context is full) or a count >= 1")
    return None if value < 0 else value


def _apply(f, options):
    for option in reversed(options):
        f = option(f)
    return f


def load_options(f):
    """The flags that choose and load the models."""
    return _apply(f, [
        click.option("-m", "--model", type=str, default=None, help="Target GGUF file, or a pair name (default: the demo pair)."),
        click.option("-md", "--model-draft", "model_draft", type=str, default=None,
                     help="Draft GGUF file, a pair name from `specllama models`, or prompt-lookup "
                          "(n-gram drafts from the text itself, no second model)."),
        click.option("--pair", default=None, help="A curated pair from `specllama models` for -m and -md."),
        click.option("-c", "--ctx-size", "ctx_size", type=click.IntRange(min=1), default=DEFAULT_N_CTX,
                     show_default=True, help="Context size in tokens, for both models."),
        click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=click.IntRange(min=-1),
                     default=DEFAULT_N_GPU_LAYERS, show_default=True,
                     help="Target layers to offload to the GPU (-1: all). Needs a GPU build of llama-cpp-python."),
        click.option("-ngld", "--n-gpu-layers-draft", "n_gpu_layers_draft",
                     type=click.IntRange(min=-1), default=None, help="Draft layers to offload (default: as -ngl)."),
        click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads."),
        click.option("--rpc", "rpc", metavar="HOST:PORT[,...]", default=None, callback=_checked(check_rpc_servers),
                     help="llama.cpp RPC servers (`specllama rpc-server` on each) for the target's -ngl layers. "
                          "Needs llama-cpp-python built with CMAKE_ARGS=\"-DGGML_RPC=on\"."),
        click.option("--rpc-draft", "rpc_draft", metavar="HOST:PORT[,...]", default=None,
                     callback=_checked(check_rpc_servers),
                     help="RPC servers for the draft's -ngld layers (default: the draft stays local)."),
        click.option("-ts", "--tensor-split", "tensor_split", metavar="N0,N1,...", default=None,
                     callback=_checked(check_tensor_split),
                     help="The target's share of offloaded layers per device, RPC servers first, then GPUs "
                          "(e.g. 3,1)."),
    ])


def _checked(check):
    """A click callback running one of options.py's checks under the flag's own name."""

    def callback(ctx: click.Context, param: click.Parameter, value):
        try:
            return check(value, param.opts[-1])
        except SpecLlamaError as e:
            raise click.BadParameter(str(e).removeprefix(f"{param.opts[-1]}: ")) from None

    return callback


def rpc_kwargs(o: dict) -> dict:
    """The RPC flags as open_engine's (and SpeculativeLlama's) keyword arguments;
    they are taken out of ``o``."""
    return {"rpc_servers": o.pop("rpc"), "rpc_servers_draft": o.pop("rpc_draft"),
            "tensor_split": o.pop("tensor_split")}


def filter_options(f):
    """Sampling filters and the seed."""
    return _apply(f, [
        click.option("--top-k", type=click.IntRange(min=0), default=DEFAULT_TOP_K, show_default=True,
                     help="Top-k filter (0: off)."),
        click.option("--top-p", type=click.FloatRange(0, 1), default=DEFAULT_TOP_P,
                     show_default=True, help="Top-p filter (1: off)."),
        click.option("--min-p", type=click.FloatRange(0, 1), default=DEFAULT_MIN_P, show_default=True,
                     help="Min-p filter (0: off)."),
        click.option("-s", "--seed", type=click.IntRange(min=-1), default=-1, show_default=True,
                     help="Random seed (-1: a fresh one each run)."),
    ])


def penalty_options(f):
    """llama.cpp's repetition penalties."""
    return _apply(f, [
        click.option("--repeat-penalty", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     help="Penalise repeats of the last --repeat-last-n tokens (1: off)."),
        click.option("--repeat-last-n", type=click.IntRange(min=-1), default=DEFAULT_PENALTY_LAST_N,
                     show_default=True, help="Tokens the penalties look back on (0: off, -1: the whole context)."),
        click.option("--presence-penalty", type=float, default=0.0, show_default=True,
                     help="Lower a seen token's logit once (0: off)."),
        click.option("--frequency-penalty", type=float, default=0.0, show_default=True,
                     help="Lower a seen token's logit per occurrence (0: off)."),
    ])


def model_options(f):
    """The model and sampling flags generate and chat share."""
    f = filter_options(f)
    f = penalty_options(f)
    f = _apply(f, [
        click.option("--color", "color", type=click.Choice(COLOR_MODES), default="auto", show_default=True,
                     help="Colour the text by origin: tokens drafted and accepted, tokens the target sampled "
                          "(auto: on a terminal)."),
        click.option("--draft-max", "--spec-draft-n-max", "draft_max", type=click.IntRange(min=0),
                     default=DEFAULT_DRAFT_MAX, show_default=True,
                     help="Most tokens drafted per target pass (0: no draft). The length adapts below it."),
        click.option("--draft-min", "--spec-draft-n-min", "draft_min", type=click.IntRange(min=0), default=0,
                     show_default=True, help="Least tokens the adaptive length drafts per target pass."),
        click.option("--draft-fixed", is_flag=True,
                     help="Always draft --draft-max tokens (no adaptive length; replays a --seed exactly)."),
        click.option("--ignore-eos", is_flag=True,
                     help="Never end at an end-of-generation token (its logit becomes -inf), as llama.cpp's flag."),
        click.option("--rule", type=click.Choice(RULES), default=DEFAULT_RULE, show_default=True,
                     help="Acceptance rule: token-wise, or block verification (jointly over the block; exact, "
                          "keeps at least as many tokens on average)."),
        click.option("--temp", "temperature", type=click.FloatRange(min=0), default=DEFAULT_TEMPERATURE,
                     show_default=True, help="Temperature (0: greedy)."),
    ])
    return load_options(f)


def _kwargs(engine, o: dict, max_tokens: int | None, stop=()) -> dict:
    """The flags as stream_generate's keyword arguments, checked."""
    return generation_kwargs(
        policy="cli", n_vocab=engine.target.n_vocab, n_ctx=engine.target.n_ctx, temperature=o["temperature"],
        top_k=o["top_k"], top_p=o["top_p"], min_p=o["min_p"], seed=o["seed"], max_tokens=max_tokens, stop=list(stop),
        repeat_penalty=o["repeat_penalty"], repeat_last_n=o["repeat_last_n"], presence_penalty=o["presence_penalty"],
        frequency_penalty=o["frequency_penalty"], draft_max=o["draft_max"], draft_min=o["draft_min"],
        adaptive=not o["draft_fixed"], rule=o["rule"],
        banned=engine.target.eog_tokens() if o["ignore_eos"] else ())


def _check_sampling(o: dict) -> None:
    """Sampling and draft flags checked before any model is loaded."""
    sampling_params(temperature=o["temperature"], top_k=o["top_k"], top_p=o["top_p"], min_p=o["min_p"],
                    seed=o["seed"])
    check_draft(o["draft_max"], o["draft_min"])


def boundary(f):
    """Turn library errors a user can cause into one-line CLI errors."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", SpecLlamaWarning)
                warnings.showwarning = functools.partial(_show_warning, warnings.showwarning)
                return f(*args, **kwargs)
        except SpecLlamaError as e:
            raise click.ClickException(str(e)) from None

    return wrapper


def _show_warning(show, message, category, filename, lineno, file=None, line=None) -> None:
    """specllama's own warnings as one line; others as Python shows them (``show``)."""
    if issubclass(category, SpecLlamaWarning):
        click.echo(f"Warning: {message}", err=True)
    else:
        show(message, category, filename, lineno, file, line)


class OneLineErrors(click.Group):
    """A command group whose usage errors are one line ("Error: ..."), with
    no usage banner, like every other error of specllama's."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            # started in the background by a shell, which ignores SIGINT for its children:
            # Ctrl-C (a SIGINT) must still stop a generation
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=OneLineErrors)
@click.version_option(package_name="specllama")
def main() -> None:
    """Exact speculative decoding for llama.cpp GGUF models."""


@main.command()
@model_options
@click.option("-p", "--prompt", required=True, help="The prompt text.")
@click.option("-n", "--n-predict", "n_predict", type=click.IntRange(min=-1), default=DEFAULT_MAX_TOKENS,
              show_default=True, callback=_n_predict, help="Tokens to generate (-1: until the context is full).")
@click.option("--stop", "-r", "--reverse-prompt", "stop", multiple=True, help="Stop at this text (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming.")
@boundary
def generate(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, prompt, n_predict,
             stop, as_json, **o) -> None:
    """Generate text after a prompt; stats go to stderr."""
    _check_sampling(o)
    color = not as_json and color_enabled(o["color"], sys.stdout)
    with open_engine(model, model_draft, pair=pair, use_draft=o["draft_max"] > 0, n_ctx=ctx_size,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads,
                     **rpc_kwargs(o)) as engine:
        kwargs = _kwargs(engine, o, n_predict, stop)
        if color:
            click.echo(legend(), err=True, color=True)
        pieces, tokens, origins, finish, stats = [], [], [], "interrupted", None
        try:
            for chunk in stream_generate(engine, prompt, **kwargs):
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
            click.echo(json.dumps(out))
        else:
            click.echo("")
            if stats is not None:
                click.secho(stats.summary(), err=True, dim=True)
        if finish == "interrupted":
            sys.exit(130)


@main.command()
@model_options
@click.option("-sys", "--system-prompt", "system_prompt", default=None, help="System prompt.")
@click.option("--chat-format", default=None,
              help="A named chat format (chatml, gemma, llama-3, ...) instead of the model's own template.")
@click.option("-n", "--n-predict", "n_predict", type=click.IntRange(min=-1), default=-1, show_default=True,
              callback=_n_predict, help="Most tokens per reply (-1: until the model stops or the context is full).")
@boundary
def chat(model, model_draft, pair, ctx_size, n_gpu_layers, n_gpu_layers_draft, threads, system_prompt, chat_format,
         n_predict, **o) -> None:
    """Chat with the model; the conversation stays in both KV caches."""
    from . import repl
    from .chat import ChatSession, template_for
    from .chat_template import check_chat_format

    _check_sampling(o)
    try:
        check_chat_format(chat_format)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    with open_engine(model, model_draft, pair=pair, use_draft=o["draft_max"] > 0, n_ctx=ctx_size,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads,
                     default_pair=DEMO_CHAT, **rpc_kwargs(o)) as engine:
        kwargs = _kwargs(engine, o, n_predict)
        template = template_for(engine.target, chat_format)
        session = ChatSession(engine, template, system_prompt, params=kwargs["params"], draft_max=kwargs["draft_max"],
                              max_tokens=kwargs["max_tokens"], adaptive=kwargs["adaptive"],
                              processor=kwargs["processor"], draft_min=kwargs["draft_min"], rule=kwargs["rule"])
        draft = ("no draft" if engine.drafter is None else
                 f"draft {engine.draft.path if engine.draft else 'prompt-lookup'} (--draft-max {o['draft_max']})")
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


@main.command()
@load_options
@filter_options
@click.option("--draft-max", "--spec-draft-n-max", "draft_maxes", metavar="1,2,4,8", default=None,
              callback=_number_list(int, "draft lengths", 1),
              help="Fixed draft lengths to sweep (default 1,2,4,8); the adaptive row is capped at the largest.")
@click.option("--temp", "temperatures", metavar="0,0.8", default=None,
              callback=_number_list(float, "temperatures", 0), help="Temperatures to sweep (default 0,0.8).")
@click.option("-n", "--n-predict", "n_predict", type=click.IntRange(min=1), default=None,
              help="Tokens per run (default 48; --quick 32).")
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
                     n_gpu_layers_draft=n_gpu_layers_draft, n_threads=threads, **rpc_kwargs(o)) as engine:
        rules = rules or [DEFAULT_RULE]
        total = b.n_runs(len(prompts), temperatures, draft_maxes, repeat, len(rules), baseline)
        with click.progressbar(length=total, label="bench", file=sys.stderr) as bar:
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


@main.command()
def models() -> None:
    """List the curated draft/target pairs and which files are downloaded."""
    from .pairs import cached_path, curated_pairs

    for pair in curated_pairs().values():
        click.echo(pair.name)
        for f in (pair.target, pair.draft):
            path = cached_path(f)
            state = f"downloaded: {path}" if path else "not downloaded"
            click.echo(f"  {f.role:<6}  {f.repo}/{f.filename}  ({f.size}; {state})")
    click.echo("Download a pair with: specllama pull NAME; then use -m NAME -md NAME or --pair NAME.")


@main.command()
@click.argument("name")
@boundary
def pull(name) -> None:
    """Download both files of a curated pair into the Hugging Face cache."""
    from .pairs import pull as pull_pair

    target, draft = pull_pair(name, on_file=lambda f: click.echo(f"{f.role}: {f.repo}/{f.filename} ({f.size})",
                                                                  err=True))
    click.echo(f"target: {target}\ndraft:  {draft}")
    click.echo(f"use: specllama generate --pair {name} -p \"...\"")


@main.command("rpc-server")
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


from .verify_command import verify  # noqa: E402
main.add_command(verify)

from .server.command import serve  # noqa: E402
main.add_command(serve)
